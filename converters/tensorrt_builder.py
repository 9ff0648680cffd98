"""Building TensorRT and TensorRT-RTX engines from ONNX: the logic the
``onnx(-fp16/-int8) -> tensorrt / tensorrt_rtx`` edges share.

* One code path over three builders: ``tensorrt`` major 10 (reduced precision
  through builder flags: FP16, INT8 for Q/DQ graphs), ``tensorrt`` major 11
  and ``tensorrt_rtx`` (always strongly typed: the precision is the ONNX
  graph's, so fp16/int8 engines are built from onnx-fp16 / onnx-int8).
* ``OnnxParser.parse_from_file`` (external data, models > 2 GB); parser
  errors are reported node by node.
* One optimization profile per workspace shape profile (``--min/--opt/
  --max-shapes``, repeated for several profiles), checked against the
  network's inputs before TensorRT sees them.
* Workspace memory limit, builder optimisation level, plugin libraries, and
  for TensorRT a timing cache kept in ``<workspace>/trt_cache/`` and reused.
* ``engine.yaml`` beside the plan: the builder version read from the plan
  header, targets, precision, profiles; the equivalent ``trtexec`` command
  goes into reproduce.sh.

Pure functions (profile checks, trtexec command lines) need nothing
installed; ``build_engine`` imports the builder module it is given.
"""

from __future__ import annotations

import logging
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from navigator.errors import NavigatorError, UserInputError

log = logging.getLogger(__name__)

BUILDERS = ("tensorrt", "tensorrt_rtx")
DEFAULT_WORKSPACE_MB = 8192           # a cap on the builder's scratch memory, as Model Navigator's default
HARDWARE_LEVELS = {"ampere_plus": ("AMPERE_PLUS", "ampere+"),
                   "same_compute_capability": ("SAME_COMPUTE_CAPABILITY", "sameComputeCapability")}
RTX_COMPUTE_CAPABILITIES = ("SM75", "SM80", "SM86", "SM89", "SM120", "SM121")
CACHE_DIR = "trt_cache"


class EngineBuildError(NavigatorError):
    """TensorRT could not parse the ONNX graph or build the engine."""


@dataclass(frozen=True)
class TensorRTParams:
    """Engine build options (CLI: --trt-workspace-mb, --trt-opt-level, --trt-plugins,
    --trt-version-compatible; the rest through converter_params)."""

    workspace_mb: int | None = DEFAULT_WORKSPACE_MB   # memory pool limit WORKSPACE, MiB; None = TensorRT's default
    opt_level: int | None = None          # builder optimisation level 0-5; None = TensorRT's default (3)
    plugins: tuple = ()                   # plugin libraries (.so), loaded before parsing
    timing_cache: bool = True             # TensorRT: reuse <workspace>/trt_cache/ (TensorRT-RTX has none)
    tf32: bool = False                    # fp32 engines: allow TF32 math (off: fp32 tolerances hold)
    version_compatible: bool = False      # TensorRT >= 8.6: loads on later TensorRT of the same major
    hardware_compatibility: str | None = None   # ampere_plus | same_compute_capability (TensorRT)
    compute_capabilities: tuple = ()      # TensorRT-RTX targets, e.g. ["SM89"]; () = the builder's default set

    def __post_init__(self):
        if self.workspace_mb is not None and (isinstance(self.workspace_mb, bool)
                                              or not isinstance(self.workspace_mb, int) or self.workspace_mb < 1):
            raise UserInputError(f"trt_workspace_mb must be a whole number of MiB >= 1, got {self.workspace_mb!r}")
        if self.opt_level is not None and (isinstance(self.opt_level, bool) or not isinstance(self.opt_level, int)
                                           or not 0 <= self.opt_level <= 5):
            raise UserInputError(f"trt_opt_level must be 0..5 (TensorRT's builder optimisation level), got "
                                 f"{self.opt_level!r}")
        if isinstance(self.plugins, str) or not all(isinstance(p, str) and p for p in self.plugins):
            raise UserInputError(f"trt_plugins must be a list of library paths, got {self.plugins!r}")
        object.__setattr__(self, "plugins", tuple(self.plugins))
        if self.hardware_compatibility is not None and self.hardware_compatibility not in HARDWARE_LEVELS:
            raise UserInputError(f"hardware_compatibility must be one of {', '.join(HARDWARE_LEVELS)}, got "
                                 f"{self.hardware_compatibility!r}")
        ccs = tuple(str(c).upper() for c in self.compute_capabilities)
        bad = [c for c in ccs if c not in RTX_COMPUTE_CAPABILITIES]
        if bad:
            raise UserInputError(f"compute_capabilities: unknown {bad[0]!r}; TensorRT-RTX knows "
                                 f"{', '.join(RTX_COMPUTE_CAPABILITIES)}")
        object.__setattr__(self, "compute_capabilities", ccs)


# --------------------------------------------------------------------------- profiles (pure)
def validate_profiles(profiles: list[dict], inputs: dict[str, list[int]]) -> list[dict]:
    """Check shape profiles against the network's inputs (``-1`` = dynamic).

    Every dynamic input needs a profile entry; static dims must equal the
    model's in min, opt and max; ``min <= opt <= max`` per dim; names must be
    inputs. Returns the profiles with dims as lists of ints (static inputs the
    profile leaves out are filled in). Raises UserInputError naming the
    profile, the input and the dim."""
    dynamic = [name for name, shape in inputs.items() if any(d < 0 for d in shape)]
    if not profiles:
        if dynamic:
            raise UserInputError(f"input '{dynamic[0]}' is dynamic and needs an optimization profile "
                                 "(--min-shapes/--opt-shapes/--max-shapes)")
        return []
    out = []
    for i, profile in enumerate(profiles):
        where = f"shape profile {i}" if len(profiles) > 1 else "the shape profile"
        unknown = [n for n in profile if n not in inputs]
        if unknown:
            raise UserInputError(f"{where} names '{unknown[0]}', which is not an input of the network; its inputs "
                                 f"are {', '.join(repr(n) for n in inputs)}")
        checked: dict = {}
        for name, shape in inputs.items():
            entry = profile.get(name)
            if entry is None:
                if name in dynamic:
                    raise UserInputError(f"{where} has no min/opt/max for the dynamic input '{name}' "
                                         f"(shape {list(shape)}); every dynamic input needs one")
                entry = {"min": list(shape), "opt": list(shape), "max": list(shape)}
            dims = {}
            for k in ("min", "opt", "max"):
                if k not in entry:
                    raise UserInputError(f"{where}: input '{name}' has no {k} shape")
                v = [int(d) for d in entry[k]]
                if len(v) != len(shape):
                    raise UserInputError(f"{where}: input '{name}' {k} {v} has {len(v)} dims, the network's input "
                                         f"has {len(shape)} ({list(shape)})")
                dims[k] = v
            for axis, model_dim in enumerate(shape):
                lo, mid, hi = dims["min"][axis], dims["opt"][axis], dims["max"][axis]
                if model_dim >= 0 and not lo == mid == hi == model_dim:
                    raise UserInputError(f"{where}: input '{name}' dim {axis} is static ({model_dim}) in the network "
                                         f"but min/opt/max give {lo}/{mid}/{hi}")
                if lo < 0:
                    raise UserInputError(f"{where}: input '{name}' dim {axis}: min {lo} is negative")
                if not lo <= mid <= hi:
                    raise UserInputError(f"{where}: input '{name}' dim {axis}: needs min <= opt <= max, got "
                                         f"{lo} / {mid} / {hi}")
            checked[name] = dims
        out.append(checked)
    return out


def shape_text(dims) -> str:
    return "x".join(str(int(d)) for d in dims) if len(dims) else "scalar"


def _trtexec_name(name: str) -> str:
    # trtexec reads names with ':' wrapped in single quotes ('input:0'); a shell
    # layer of quoting is added by shlex when the command is written.
    return f"'{name}'" if (":" in name or "," in name) else name


def trtexec_command(*, builder: str, onnx: str, engine: str, profiles: list[dict], precision: str = "fp32",
                    trt_major: int | None = None, params: TensorRTParams | None = None,
                    timing_cache: str | None = None) -> list[str]:
    """The ``trtexec`` (TensorRT) or ``tensorrt_rtx`` (TensorRT-RTX) command that
    builds the same engine. Precision flags only for TensorRT 10 (``trt_major``
    10): TensorRT 11 and TensorRT-RTX take the precision from the graph."""
    p = params or TensorRTParams()
    tool = "tensorrt_rtx" if builder == "tensorrt_rtx" else "trtexec"
    cmd = [tool, f"--onnx={onnx}", f"--saveEngine={engine}"]
    for profile in profiles:
        for k, flag in (("min", "--minShapes"), ("opt", "--optShapes"), ("max", "--maxShapes")):
            cmd.append(f"{flag}=" + ",".join(f"{_trtexec_name(n)}:{shape_text(d[k])}" for n, d in profile.items()))
    if p.workspace_mb is not None:
        cmd.append(f"--memPoolSize=workspace:{p.workspace_mb}")
    if p.opt_level is not None:
        cmd.append(f"--builderOptimizationLevel={p.opt_level}")
    for lib in p.plugins:
        cmd.append(f"--staticPlugins={lib}")
    if builder == "tensorrt":
        if trt_major == 10:
            cmd.extend({"fp16": ["--fp16"], "int8": ["--int8"], "bf16": ["--bf16"]}.get(precision, []))
        if precision == "fp32" and not p.tf32:
            cmd.append("--noTF32")
        if p.version_compatible:
            cmd.append("--versionCompatible")
        if p.hardware_compatibility:
            cmd.append(f"--hardwareCompatibilityLevel={HARDWARE_LEVELS[p.hardware_compatibility][1]}")
        if timing_cache and p.timing_cache:
            cmd.append(f"--timingCacheFile={timing_cache}")
        cmd.append("--skipInference")
    return cmd


def reproduce_lines(*, builder: str, onnx: str, engine: str, profiles: list[dict], precision: str,
                    params: TensorRTParams) -> list[str]:
    """Lines for reproduce.sh: the trtexec command for TensorRT 11 and for
    TensorRT 10 (they differ in the precision flags), or the tensorrt_rtx one."""
    quote = lambda cmd: " ".join(shlex.quote(x) for x in cmd)  # noqa: E731
    lines = ["", "# The same engine with NVIDIA's command-line builder. An engine loads only with the TensorRT",
             "# version that built it: run this inside the container you serve from (e.g. in",
             "# nvcr.io/nvidia/tritonserver:<YY.MM>-py3, which ships trtexec), on the GPU you serve on."]
    if len(profiles) > 1:
        lines.append(f"# {len(profiles)} optimization profiles: one --minShapes/--optShapes/--maxShapes set each.")
    if builder == "tensorrt_rtx":
        lines.append("# TensorRT-RTX's SDK ships this builder as `tensorrt_rtx` (trtexec's counterpart):")
        lines.append("# " + quote(trtexec_command(builder=builder, onnx=onnx, engine=engine, profiles=profiles,
                                           precision=precision, params=params)))
        return lines
    cache = f"{CACHE_DIR}/trtexec.timing.cache"
    lines.append("# TensorRT 11 (strongly typed: the precision is the ONNX graph's):")
    lines.append("# " + quote(trtexec_command(builder=builder, onnx=onnx, engine=engine, profiles=profiles,
                                               precision=precision, trt_major=11, params=params,
                                               timing_cache=cache)))
    lines.append("# TensorRT 10 (precision through builder flags):")
    lines.append("# " + quote(trtexec_command(builder=builder, onnx=onnx, engine=engine, profiles=profiles,
                                               precision=precision, trt_major=10, params=params,
                                               timing_cache=cache)))
    if params.plugins:
        lines.append("# Serve with the plugins loaded: tritonserver --backend-config=tensorrt,plugins="
                     + shlex.quote(";".join(params.plugins)) + " (or LD_PRELOAD=" + ":".join(params.plugins) + ")")
    return lines


def triton_notes(params: TensorRTParams) -> dict:
    """What Triton needs to load the engine (for engine.yaml and the Triton emitter)."""
    backend_config = []
    if params.plugins:
        backend_config.append("tensorrt,plugins=" + ";".join(params.plugins))
    if params.version_compatible:
        backend_config.append("tensorrt,version-compatible=true")
    notes = {"platform": "tensorrt_plan", "backend_config": backend_config}
    if params.plugins:
        notes["ld_preload"] = ":".join(params.plugins)
    return notes


# --------------------------------------------------------------------------- the build (needs the builder)
def parser_errors(parser) -> list[str]:
    """One line per parser error: node index, operator, node name, description."""
    out = []
    for i in range(parser.num_errors):
        e = parser.get_error(i)
        node = _call(e, "node", -1)
        op = _call(e, "node_operator", "")
        name = _call(e, "node_name", "")
        desc = " ".join(str(_call(e, "desc", "")).split())
        code = _call(e, "code", "")
        where = f"node {node}" if node is not None and node >= 0 else "the graph"
        if op or name:
            where += f" ({' '.join(x for x in (op, repr(name) if name else '') if x)})"
        text = f"{where}: {desc}"
        if code:
            text += f" [{str(code).rsplit('.', 1)[-1]}]"
        if "plugin not found" in desc.lower() and op:
            text += f"; if {op} is a plugin op, pass its library with --trt-plugins LIB.so"
        out.append(text)
    return out


def _call(obj, name, default):
    fn = getattr(obj, name, None)
    try:
        return fn() if callable(fn) else default
    except Exception:  # older bindings lack some accessors
        return default


def _major(version: str) -> int:
    return int(str(version).split(".")[0])


def load_plugins(trt, logger, plugins) -> None:
    """Register TensorRT's own plugins and load each library (its creators
    register themselves when it is loaded), as Polygraphy's LoadPlugins does."""
    import ctypes

    try:
        trt.init_libnvinfer_plugins(logger, "")
    except Exception as e:   # no plugin library in this build: only user plugins then
        log.info("init_libnvinfer_plugins: %s", e)
    for lib in plugins:
        path = Path(lib)
        if not path.is_file():
            raise UserInputError(f"--trt-plugins: {lib}: no such file")
        try:
            ctypes.CDLL(str(path.resolve()), mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise UserInputError(f"--trt-plugins: cannot load {lib}: {e}") from None


def make_logger(trt, level: str = "WARNING"):
    """A TensorRT logger that sends the builder's messages to Python logging, so
    they land in the format's convert.log instead of the process's stderr."""
    order = ["INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE"]
    keep = {getattr(trt.Logger, name) for name in order[:order.index(level) + 1] if hasattr(trt.Logger, name)}
    to_python = {"INTERNAL_ERROR": logging.ERROR, "ERROR": logging.ERROR, "WARNING": logging.WARNING,
                 "INFO": logging.INFO, "VERBOSE": logging.DEBUG}
    levels = {getattr(trt.Logger, name): to_python[name] for name in order if hasattr(trt.Logger, name)}

    class _Logger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)

        def log(self, severity, msg):
            if severity in keep:
                log.log(levels.get(severity, logging.INFO), "%s: %s", trt.__name__, msg)

    return _Logger()


def _gpu_compute_capability() -> str | None:
    """The first GPU's compute capability from nvidia-smi, or None."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.stdout.strip().splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else ""
    return ("SM" + first.replace(".", "")) if first else None


@dataclass
class BuildResult:
    plan: Path
    info: dict


def build_engine(*, builder: str, onnx_path: Path, plan_path: Path, profiles: list[dict], precision: str,
                 params: TensorRTParams, workspace: Path | None = None, logger_level: str = "WARNING",
                 relpath=lambda p: str(p)) -> BuildResult:
    """Parse ``onnx_path`` with ``builder`` (tensorrt | tensorrt_rtx), build one
    optimization profile per entry of ``profiles`` and write the plan and
    ``engine.yaml`` beside it."""
    import importlib

    from navigator.tools import engine as engine_mod

    if builder not in BUILDERS:
        raise ValueError(f"unknown builder {builder!r}")
    trt = importlib.import_module(builder)
    version = trt.__version__
    major = _major(version)
    if builder == "tensorrt" and major < 10:
        raise EngineBuildError(f"TensorRT {version} is too old: navigator builds with TensorRT 10 or 11")
    strongly_typed = builder == "tensorrt_rtx" or major >= 11
    if builder == "tensorrt" and params.compute_capabilities:
        raise UserInputError("compute_capabilities applies to TensorRT-RTX only; TensorRT builds for the GPU it "
                             "runs on (see hardware_compatibility)")
    if builder == "tensorrt_rtx" and (params.version_compatible or params.hardware_compatibility):
        raise UserInputError("version_compatible / hardware_compatibility are TensorRT options; TensorRT-RTX "
                             "does not support them")
    if not strongly_typed and precision not in ("fp32", "fp16", "int8"):
        raise UserInputError(f"precision {precision} is not built by navigator's TensorRT {major} path")

    logger = make_logger(trt, logger_level)
    start = time.perf_counter()
    load_plugins(trt, logger, params.plugins)
    trt_builder = trt.Builder(logger)
    network = trt_builder.create_network(0)    # TRT 10: explicit batch; TRT 11 / RTX: strongly typed always
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = parser_errors(parser)
        raise EngineBuildError(f"{'TensorRT-RTX' if builder == 'tensorrt_rtx' else 'TensorRT'} {version} cannot "
                               f"parse {relpath(onnx_path)}: " + "; ".join(errors or ["no error detail"]))
    inputs = {network.get_input(i).name: [int(d) for d in network.get_input(i).shape]
              for i in range(network.num_inputs)}
    checked = validate_profiles(profiles, inputs)
    config = trt_builder.create_builder_config()
    if params.workspace_mb is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(params.workspace_mb) << 20)
    if params.opt_level is not None:
        config.builder_optimization_level = int(params.opt_level)
    flags = []
    if not strongly_typed:
        if precision == "fp16":
            flags.append("FP16")
        elif precision == "int8":
            flags.append("INT8")       # explicit quantization: the Q/DQ nodes of onnx-int8 set the scales
    if precision == "fp32" and not params.tf32 and hasattr(trt.BuilderFlag, "TF32"):
        config.clear_flag(trt.BuilderFlag.TF32)
    if params.version_compatible:
        flags.append("VERSION_COMPATIBLE")
    for flag in flags:
        config.set_flag(getattr(trt.BuilderFlag, flag))
    if params.hardware_compatibility:
        config.hardware_compatibility_level = getattr(trt.HardwareCompatibilityLevel,
                                                      HARDWARE_LEVELS[params.hardware_compatibility][0])
    if params.compute_capabilities:
        config.num_compute_capabilities = len(params.compute_capabilities)
        for i, cc in enumerate(params.compute_capabilities):
            config.set_compute_capability(getattr(trt.ComputeCapability, cc), i)
    for prof in checked:
        profile = trt_builder.create_optimization_profile()
        for name, dims in prof.items():
            profile.set_shape(name, dims["min"], dims["opt"], dims["max"])
        if config.add_optimization_profile(profile) < 0:
            raise EngineBuildError(f"TensorRT rejected the optimization profile {prof}")
    cache_file = None
    if builder == "tensorrt" and params.timing_cache and workspace is not None:
        cache_file = Path(workspace) / CACHE_DIR / f"timing-{builder}-{version}.cache"
        data = cache_file.read_bytes() if cache_file.is_file() else b""
        cache = config.create_timing_cache(data)
        if not config.set_timing_cache(cache, ignore_mismatch=False):
            log.warning("timing cache %s does not match this GPU/TensorRT; starting a new one", cache_file)
            config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)
    serialized = trt_builder.build_serialized_network(network, config)
    if serialized is None:
        raise EngineBuildError(f"{builder} {version} failed to build the engine (the builder's errors are in "
                               "convert.log)")
    data = bytes(serialized)
    from navigator.workspace.atomic import write_bytes, write_text

    write_bytes(plan_path, data)
    if cache_file is not None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(cache_file, bytes(config.get_timing_cache().serialize()))
    build_s = round(time.perf_counter() - start, 4)
    header = engine_mod.parse_header(data[:64], size=len(data))
    if builder == "tensorrt_rtx":
        targets = list(header.compute_capabilities) or list(params.compute_capabilities)
    else:
        targets = [_gpu_compute_capability()] if not params.hardware_compatibility else []
    info = {
        "builder": builder,
        "builder_version": header.version_text,        # read back from the plan header
        "module_version": version,
        "precision": precision,
        "strongly_typed": strongly_typed,
        "precision_flags": flags,
        "tf32": bool(params.tf32) if precision == "fp32" else None,
        "target": {"compute_capabilities": [t for t in targets if t] or None,
                   "hardware_compatibility": params.hardware_compatibility},
        "version_compatible": params.version_compatible,
        "profiles": checked,
        "workspace_mb": params.workspace_mb,
        "opt_level": params.opt_level,
        "plugins": list(params.plugins),
        "timing_cache": relpath(cache_file) if cache_file else None,
        "source": relpath(onnx_path),
        "plan": relpath(plan_path),
        "plan_bytes": len(data),
        "build_s": build_s,
        "trtexec": " ".join(shlex.quote(x) for x in trtexec_command(
            builder=builder, onnx=relpath(onnx_path), engine=relpath(plan_path), profiles=checked,
            precision=precision, trt_major=major if builder == "tensorrt" else None, params=params,
            timing_cache=f"{CACHE_DIR}/trtexec.timing.cache")),
        "triton": (triton_notes(params) | {"loads_in_releases": engine_mod.releases_with(header.version)})
        if builder == "tensorrt" else {"platform": None, "note": "Triton's TensorRT backend runs TensorRT, not "
                                       "TensorRT-RTX: serve this engine from a Python-backend model"},
    }
    import yaml

    write_text(plan_path.parent / "engine.yaml", yaml.safe_dump(info, sort_keys=False))
    log.info("built %s (%d bytes) with %s %s in %.2f s", relpath(plan_path), len(data), builder, version, build_s)
    return BuildResult(plan_path, info)

