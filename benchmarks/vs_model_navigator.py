"""Navigator against Triton Model Navigator 0.14 on the same models, formats and samples (CPU).

    python benchmarks/vs_model_navigator.py [--models cnn,transformer,onnx] [--rounds 1]
        [--mn-venv ~/.cache/navigator-bench/mn014] [--out benchmarks/results/vs_model_navigator_cpu.md]
        [--tools mn,nav,mn-fair,nav-seq,nav-eq] [--no-oracle] [--caches as-is|cold|warm]

Model Navigator 0.14 (`triton-model-navigator==0.14.0`) is installed into a venv of its
own outside the repository (reused when present): the wheel with `--no-deps`, then its
Requires-Dist by hand, leaving out tensorrt, nvidia-modelopt and torch_tensorrt (no CPU
use) and taking onnxruntime for onnxruntime-gpu; torch is pinned to 2.13.0.

Per model and round the tools run alternately, each in a fresh Python process:
Model Navigator as shipped (`mn`), Navigator (`nav`), Model Navigator made comparable
(`mn-fair`), Navigator as it was before issue #20 (`nav-seq`: `no_race=True, jobs=1,
no_warm_workers=True`, one format at a time, each profiled to full depth in a fresh worker; its
profiling windows are today's), Navigator again, and
Navigator with Model Navigator's profiling window (`nav-eq`). `mn-fair` differs from `mn`
in two switches only: `torch.cuda.synchronize` is a no-op in every process of that venv
(the import hook module HOOKS_MODULE, imported by a .pth, acting only when
NAVBENCH_NO_CUDA_SYNC=1 is set by this script; its torch runners call it on CPU builds and
fail), and `autocast=False` in TorchConfig / TorchScriptConfig / TorchExportConfig (its
default bf16 autocast on CPU is emulated and slow). Both tools get the same live module or
ONNX file, the same two sample batches, the CPU as device, max batch size 64, and a
tolerance of atol 1e-5, rtol 1e-4 (Polygraphy's rule, elementwise): Navigator's own
check, and for Model Navigator a verify_func that compares with the module's eager fp32
outputs (its VerifyModel reference is its TorchCPU runner with bf16 autocast on, ~1e-3
off). Profiling settings are each tool's own defaults, which nearly agree: 3-10 windows
until the last 3 agree within 10%, batch sizes doubling while throughput gains >= 5%
(Model Navigator: windows of 25 inferences, 2 more sizes after a gain < 5%; Navigator:
windows of >= 10 inferences and >= 0.1 s or 1,000 inferences, a 20 s budget per format). `nav-eq` sets
Navigator's window to 25 inferences with no minimum duration (the same hook module, imported
by a sitecustomize on that run's PYTHONPATH and inherited by its workers, acting when
NAVBENCH_EQUAL_WINDOWS=1), to show the pipelines apart from the profiling effort. Each
Navigator run prints its phase timings (prepare, convert + verify, race), which the "where
the time goes" table shows beside the sums of the recorded step durations.

Pick accuracy (``--no-oracle`` skips it): after each model's runs, one process in Navigator's
venv loads every artifact either tool verified (each tool's own TorchScript, ExportedProgram and
ONNX files; the source module eager and under torch.compile, shared by both) and measures them
in ORACLE_ROUNDS interleaved rounds (one window, after 0.1 s unmeasured, per candidate and batch size per round, in a
shuffled order); a run's pick is right when it is the fastest candidate within the measured
noise (its upper quartile reaches the fastest's lower quartile), among all candidates and among
the run's own verified ones.

Process starts are counted with `strace -f --seccomp-bpf -e trace=execve`: every
successful execve in the tool's process tree after its own start (Python interpreters
and others, e.g. the C++ compiler under torch.compile, counted apart), in one extra run per
(model, tool) whose times are not used (``--no-count-starts`` skips it). The timed runs are
not traced: under strace, even with a seccomp filter that stops on execve only, torch
inference in Navigator's workers ran 2-3x slower with window spreads up to 1.5 (onnxruntime
did not), which distorted both the wall times and the profiles every pick is made from.
Wall time is the tool process's; CPU time is the process tree's user + system time.

Bytecode: pip compiles an installed package's modules (Model Navigator's venv has them); this
checkout is installed editable, and where ``PYTHONDONTWRITEBYTECODE`` is set no run writes them,
so every Navigator process would compile its modules from source each time (~0.15 s in the
calling process alone). The benchmark compiles the checkout's packages once before timing
(:func:`ensure_bytecode`), as installing a wheel would.
``--caches`` sets both tools' torch.compile caches alike (:data:`CACHES`): as earlier runs left them,
empty for every run (a first conversion), or kept across the benchmark's runs after one untimed run
per tool and model (a second conversion).
The ratio is Navigator / mn-fair per model, on the medians over rounds, on the minima
(the least disturbed runs when other jobs share the machine) and on CPU time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_VENV = Path.home() / ".cache" / "navigator-bench" / "mn014"
MN_VERSION = "0.14.0"
TORCH = "torch==2.13.0"
# Requires-Dist of triton-model-navigator 0.14.0 that run on a CPU: tensorrt, nvidia-modelopt[onnx]
# and torch_tensorrt are left out, onnxruntime-gpu is replaced by onnxruntime (same ~=1.20 range).
MN_REQUIREMENTS = ["numpy<2", "dacite~=1.8", "fire>=0.4.0", "jsonlines>=3.1.0", "loguru>=0.7.2", "mpmath~=1.3",
                   "onnx~=1.16", "onnx_graphsurgeon~=0.5", "onnxruntime~=1.20", "onnxscript", "packaging~=24.1",
                   "polygraphy>=0.49.0", "psutil>=5.7", "py-cpuinfo>=8.0", "pynvml~=11.5", "python-slugify~=8.0",
                   "pyyaml~=6.0", "tabulate>=0.8", "tritonclient[grpc]~=2.47", "wrapt>=1.16", "pyee>=11.1.0",
                   "rich>=13.7.1", "protobuf>=4"]
MODELS = {
    # name: (kind, what, sample batches' description)
    "cnn": ("torch", "examples/cnn.py:small_cnn", "x float32 8x3x32x32 in [0, 1)"),
    "transformer": ("torch", "examples/transformer_block.py:transformer_block", "ids int64 8x32 in [0, 1000)"),
    "onnx": ("onnx", "examples/tiny_classifier.onnx", "ids int64 8x16 in [0, 1000)"),
}
TOOLS = ("mn", "nav", "mn-fair", "nav-seq", "nav", "nav-eq")   # the order of one round
# Navigator's options per tool: nav-seq is the pipeline before issue #20 (one format at a time, each
# profiled to full depth in its own worker, no race)
NAV_OPTIONS = {"nav": {}, "nav-eq": {}, "nav-seq": {"no_race": True, "jobs": 1, "no_warm_workers": True}}
ATOL, RTOL = 1e-5, 1e-4
MAX_BATCH = 64

# One import hook module for both patches, each switched on by an environment variable that this
# script sets only for the run that wants it: NAVBENCH_NO_CUDA_SYNC=1 (mn-fair) makes
# torch.cuda.synchronize a no-op as torch.cuda is imported; NAVBENCH_EQUAL_WINDOWS=1 (nav-eq) gives
# Navigator's profiler Model Navigator's window (25 inferences, no minimum duration). Installed twice,
# the same file: imported by a .pth in the benchmark's Model Navigator venv (every process it spawns
# gets it) and by a sitecustomize on the PYTHONPATH of a nav-eq run (Navigator's workers inherit it).
HOOKS_NAME = "_navbench_hooks"
HOOKS_MODULE = '''"""Written by Navigator's benchmarks/vs_model_navigator.py; inert unless its variables are set."""
import os
import sys


def _after_import(name, patch):
    """Call ``patch(module)`` right after module ``name`` is first imported."""
    import importlib.abc
    import importlib.machinery

    class _Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None or spec.loader is None:
                return spec
            inner = spec.loader.exec_module

            def exec_module(module):
                inner(module)
                patch(module)
            spec.loader.exec_module = exec_module
            sys.meta_path.remove(self)
            return spec

    sys.meta_path.insert(0, _Hook())


def _no_cuda_sync(module):
    module.synchronize = lambda device=None: None


def _equal_windows(module):
    original = module.ProfileSettings

    def settings(*args, **kwargs):
        s = original(*args, **kwargs)
        s.window_s, s.window_min_iters = 0.0, 25
        return s
    module.ProfileSettings = settings


if os.environ.get("NAVBENCH_NO_CUDA_SYNC") == "1":
    _after_import("torch.cuda", _no_cuda_sync)
if os.environ.get("NAVBENCH_EQUAL_WINDOWS") == "1":
    _after_import("navigator.execution.profiling", _equal_windows)
'''


def install_hooks(folder: Path, *, pth: bool) -> None:
    """The hook module into ``folder`` (a site-packages: with a .pth importing it; else a
    PYTHONPATH folder: with a sitecustomize importing it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{HOOKS_NAME}.py").write_text(HOOKS_MODULE)
    (folder / (f"{HOOKS_NAME}.pth" if pth else "sitecustomize.py")).write_text(f"import {HOOKS_NAME}\n")
    for old in ("_navbench_patch.py", "_navbench_patch.pth"):   # the two hooks of earlier versions
        (folder / old).unlink(missing_ok=True)


SAMPLES_CODE = '''
def make_samples(model):
    import numpy as np
    rng = np.random.default_rng(0)
    if model == "cnn":
        return [{"x": rng.random((8, 3, 32, 32), dtype=np.float32)} for _ in range(2)]
    if model == "transformer":
        return [{"ids": rng.integers(0, 1000, (8, 32), dtype=np.int64)} for _ in range(2)]
    return [{"ids": rng.integers(0, 1000, (8, 16), dtype=np.int64)} for _ in range(2)]


def load_factory(root, spec):
    import importlib.util
    file, _, name = spec.partition(":")
    mod_spec = importlib.util.spec_from_file_location("bench_model", f"{root}/{file}")
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return getattr(module, name)()


def close(a, b, atol, rtol):
    import numpy as np
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False
    diff = np.abs(a - b)
    return bool(np.all((diff <= atol) | (diff <= rtol * np.abs(b))))
'''

# Runs inside the Model Navigator venv. Spawned children import it as __mp_main__: all work under the guard.
MN_CHILD = SAMPLES_CODE + '''

_REFERENCE = []


def fp32_reference():
    """The module's eager fp32 outputs on the samples, flat, in order. Model Navigator's own
    reference in VerifyModel is its TorchCPU runner with its default bf16 autocast (~1e-3 off),
    so the verify function compares with this one instead (as Navigator does)."""
    if not _REFERENCE:
        import json, os
        import torch
        args = json.loads(os.environ["NAVBENCH_ARGS"])
        module = load_factory(args["root"], args["spec"])
        for s in make_samples(args["model"]):
            with torch.inference_mode():
                out = module(**{k: torch.from_numpy(v) for k, v in s.items()})
            if isinstance(out, torch.Tensor):
                out = [out]
            elif isinstance(out, dict):
                out = list(out.values())
            _REFERENCE.append([t.float().numpy() for t in out])
    return _REFERENCE


def verify_func(ys_runner, ys_expected):
    ys_runner, ys_expected = list(ys_runner), list(ys_expected)
    reference = fp32_reference()
    if len(ys_runner) != len(reference):
        return False
    for got, ref in zip(ys_runner, reference):
        if len(got) != len(ref):
            return False
        if not all(close(g, r, ATOL, RTOL) for g, r in zip(got.values(), ref)):
            return False
    return True


def main():
    import json, sys, time
    args = json.loads(sys.argv[1])
    start = time.perf_counter()
    import model_navigator as nav
    from model_navigator.configuration import DeviceKind, OptimizationProfile
    kind, spec, model = args["kind"], args["spec"], args["model"]
    samples = make_samples(model)
    profile = OptimizationProfile(max_batch_size=args["max_batch"])
    common = dict(target_device=DeviceKind.CPU, optimization_profile=profile, workspace=args["workspace"],
                  verify_func=verify_func)
    if kind == "torch":
        import torch
        module = load_factory(args["root"], spec)
        loader = [{k: torch.from_numpy(v) for k, v in s.items()} for s in samples]
        if model == "cnn":   # a single positional input
            loader = [s["x"] for s in loader]
        custom = []
        if args["fair"]:
            custom = [nav.TorchConfig(autocast=False), nav.TorchScriptConfig(autocast=False),
                      nav.TorchExportConfig(autocast=False)]
        nav.torch.optimize(model=module, dataloader=loader, sample_count=len(loader), custom_configs=custom,
                           target_formats=("torchscript", "torch-exportedprogram", "onnx"), **common)
    else:
        nav.onnx.optimize(model=f"{args['root']}/{spec}", dataloader=samples, sample_count=len(samples),
                          target_formats=("onnx",), **common)
    print("NAVBENCH_INNER_S", time.perf_counter() - start)


ATOL, RTOL = %r, %r

if __name__ == "__main__":
    main()
'''

NAV_CHILD = SAMPLES_CODE + '''

def main():
    import json, sys, time
    args = json.loads(sys.argv[1])
    start = time.perf_counter()
    sys.path.insert(0, args["root"])
    import navigator
    kind, spec, model = args["kind"], args["spec"], args["model"]
    samples = make_samples(model)
    source = load_factory(args["root"], spec) if kind == "torch" else f"{args['root']}/{spec}"
    # Navigator's default set for a torch source (Model Navigator makes two TorchScript variants: 6 pairs each)
    targets = ["torchscript", "torch_export", "onnx", "onnx-optimized"] if kind == "torch" else ["onnx"]
    result = navigator.convert(source, samples, targets=targets, workdir=args["workspace"], progress=False,
                               max_batch_size=args["max_batch"], atol=ATOL, rtol=RTOL, **args["options"])
    print("NAVBENCH_INNER_S", time.perf_counter() - start, "exit", result.exit_code)
    timings = {k: v for k, v in result.timings.items() if isinstance(v, (int, float))}
    print("NAVBENCH_TIMINGS", json.dumps(timings))


ATOL, RTOL = %r, %r

if __name__ == "__main__":
    main()
'''


# The pick-accuracy oracle: runs in Navigator's venv (the same torch and onnxruntime releases as Model
# Navigator's) after both tools' runs of a model; measures every artifact either tool verified, in
# interleaved rounds, and prints each cell's per-round throughputs.
ORACLE_CHILD = SAMPLES_CODE + '''
import time


def loader(kind, path, root, spec):
    """infer(batch dict) for one candidate, loaded as a user would load that artifact."""
    if kind == "onnx":
        import onnxruntime as ort
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        return lambda feeds: session.run(None, dict(zip(names, feeds.values())))
    import torch
    if kind == "eager":
        module = load_factory(root, spec)
    elif kind == "compile":
        module = torch.compile(load_factory(root, spec))
    elif kind == "torchscript":
        module = torch.jit.load(path).eval()
    elif kind == "export":
        module = torch.export.load(path).module()
    else:
        raise ValueError(kind)
    by_name = []   # set once positional arguments are refused (Model Navigator exports keyword arguments)

    def infer(feeds):
        with torch.inference_mode():
            if by_name:
                return module(**{k: torch.from_numpy(v) for k, v in feeds.items()})
            try:
                return module(*[torch.from_numpy(v) for v in feeds.values()])
            except (TypeError, ValueError) as e:
                if "keyword" not in str(e):
                    raise
                by_name.append(True)
                return module(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    return infer


def window(infer, feeds, seconds):
    n, start = 0, time.perf_counter()
    while n < 2 or time.perf_counter() - start < REWARM_S:   # unmeasured: back to speed after the others
        infer(feeds)
        n += 1
    n, start = 0, time.perf_counter()
    while n < 3 or time.perf_counter() - start < seconds:
        infer(feeds)
        n += 1
    return n / (time.perf_counter() - start)


# A runner measured right after another runs at about half speed for its first ~50 ms (caches,
# its thread pool waking): each window follows 0.1 s of unmeasured running.
REWARM_S = 0.1


def main():
    import json, random, sys
    import numpy as np
    args = json.loads(sys.argv[1])
    sample = make_samples(args["model"])[0]
    feeds = {b: {k: np.ascontiguousarray(np.take(v, np.arange(b) % v.shape[0], axis=0)) for k, v in sample.items()}
             for b in args["batches"]}
    infers, errors, sizes = {}, {}, {}
    for c in args["candidates"]:
        try:
            infers[c["name"]] = loader(c["kind"], c.get("path"), args["root"], args["spec"])
            sizes[c["name"]], refused = [], []
            for b in args["batches"]:   # warm-up: torch.compile compiles, TorchScript's JIT specialises
                settle = time.perf_counter() + 2.0
                try:
                    for i in range(200):
                        infers[c["name"]](feeds[b])
                        if i >= 20 and time.perf_counter() > settle:
                            break
                except Exception as e:   # noqa: BLE001 - a batch size the artifact refuses (its export's range)
                    refused.append(f"batch {b}: {type(e).__name__}: {e}"[:200])
                    continue
                sizes[c["name"]].append(b)
            if not sizes[c["name"]]:
                raise RuntimeError("; ".join(refused))
            if refused:
                errors[c["name"] + " (some batch sizes)"] = "; ".join(refused)[:300]
        except Exception as e:   # noqa: BLE001 - an artifact this process cannot load is reported
            infers.pop(c["name"], None)
            errors[c["name"]] = f"{type(e).__name__}: {e}"[:300]
    cells = [(name, b) for name in infers for b in sizes[name]]
    rng = random.Random(0)
    out = {name: {str(b): [] for b in args["batches"]} for name in infers}
    for _ in range(args["rounds"]):
        rng.shuffle(cells)
        for name, b in cells:
            out[name][str(b)].append(window(infers[name], feeds[b], args["window_s"]) * b)
    print("NAVBENCH_ORACLE", json.dumps({"throughput": out, "errors": errors}))


if __name__ == "__main__":
    main()
'''
ORACLE_BATCHES = [1, 8, 64]
ORACLE_ROUNDS = 7
ORACLE_WINDOW_S = 0.2


# --------------------------------------------------------------------------- setup
def ensure_mn_venv(venv: Path) -> Path:
    """The Model Navigator venv's python, built when missing."""
    python = venv / "bin" / "python"
    marker = venv / ".navbench-ready"
    if not marker.exists():
        print(f"installing triton-model-navigator=={MN_VERSION} into {venv} (once) ...", flush=True)
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run(pip + ["--no-deps", f"triton-model-navigator=={MN_VERSION}"], check=True)
        subprocess.run(pip + [TORCH] + MN_REQUIREMENTS, check=True)
        marker.write_text(f"triton-model-navigator=={MN_VERSION}\n")
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    install_hooks(site, pth=True)
    return python


PACKAGES = ("navigator", "converters", "validators", "workspace")


def ensure_bytecode(root: Path) -> None:
    """Compile the checkout's packages (module docstring, "Bytecode"); unchanged ones are skipped."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", *PACKAGES], cwd=root, check=True,
                   stdout=subprocess.DEVNULL)


def _versions(python: Path, names: list[str]) -> dict:
    code = ("import importlib.metadata as m, json, sys\n"
            "out = {}\n"
            "for n in sys.argv[1:]:\n"
            "    try: out[n] = m.version(n)\n"
            "    except Exception: out[n] = None\n"
            "print(json.dumps(out))")
    res = subprocess.run([str(python), "-c", code, *names], capture_output=True, text=True)
    return json.loads(res.stdout) if res.returncode == 0 else {}


def machine() -> dict:
    from machine_info import summary

    return summary()


# --------------------------------------------------------------------------- one run
_EXEC_OK = re.compile(r'^(\d+)\s+(?:execve\("([^"]*)"|<\.\.\. execve resumed>).*\)\s+=\s+0\s*$')
_EXEC_START = re.compile(r'^(\d+)\s+execve\("([^"]*)"')


def count_execs(trace: Path) -> dict:
    """Successful execve calls in an strace -f log, less the tool process's own."""
    pending: dict[str, str] = {}
    programs: list[str] = []
    for line in trace.read_text(errors="replace").splitlines():
        start = _EXEC_START.match(line)
        if start and line.rstrip().endswith("<unfinished ...>"):
            pending[start.group(1)] = start.group(2)
            continue
        ok = _EXEC_OK.match(line)
        if ok:
            programs.append(ok.group(2) or pending.pop(ok.group(1), "?"))
    programs = programs[1:]   # the tool process itself
    python = sum(1 for p in programs if re.search(r"python[\d.]*$", p))
    return {"total": len(programs), "python": python, "other": len(programs) - python}


def run_tool(tool: str, model: str, python_by_tool: dict, scripts: dict, tmp: Path, *, trace: bool = False,
             caches: str = "as-is") -> dict:
    """One run of ``tool`` on ``model``. ``trace``: under strace, to count its process starts
    only -- its wall time, CPU time and throughputs are not the tool's (see the docstring).
    ``caches``: the tools' compiler caches (:data:`CACHES`)."""
    kind, spec, _ = MODELS[model]
    ws = tmp / f"{model}-{tool}-{'count-' if trace else ''}{time.monotonic_ns()}"
    ws.mkdir()
    args = {"kind": kind, "spec": spec, "model": model, "root": str(ROOT), "workspace": str(ws / "workspace"),
            "fair": tool == "mn-fair", "max_batch": MAX_BATCH, "options": NAV_OPTIONS.get(tool, {})}
    env = dict(os.environ)
    env.pop("NAVBENCH_NO_CUDA_SYNC", None)
    if tool == "mn-fair":
        env["NAVBENCH_NO_CUDA_SYNC"] = "1"
    env["NAVBENCH_ARGS"] = json.dumps(args)
    env.pop("NAVBENCH_EQUAL_WINDOWS", None)
    if tool == "nav-eq":
        env["NAVBENCH_EQUAL_WINDOWS"] = "1"
        env["PYTHONPATH"] = os.pathsep.join([str(scripts["eq"])] + [p for p in [env.get("PYTHONPATH")] if p])
    kind_ = "nav" if tool.startswith("nav") else "mn"
    cache_env(env, kind_, caches, tmp, ws)
    python = python_by_tool[kind_]
    trace_file = ws / "execve.trace"
    cmd = [python, scripts[kind_], json.dumps(args)]
    if trace:
        cmd = ["strace", "-f", "--seccomp-bpf", "-qq", "-e", "trace=execve", "-o", str(trace_file)] + cmd
    load = loadavg()
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([str(c) for c in cmd], cwd=ws, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    (ws / "tool.log").write_text(proc.stdout + proc.stderr)
    execs = count_execs(trace_file) if trace_file.exists() else {"total": None, "python": None, "other": None}
    summary = (summarize_nav if tool.startswith("nav") else summarize_mn)(ws / "workspace")
    timings = re.search(r"^NAVBENCH_TIMINGS (.*)$", proc.stdout, flags=re.M)
    summary.update(tool=tool, model=model, wall_s=wall, cpu_s=cpu, returncode=proc.returncode, execs=execs,
                   log=str(ws / "tool.log"), load=load, load_after=loadavg(),
                   timings=json.loads(timings.group(1)) if timings else {})
    return summary


CACHES = {
    "as-is": "each tool's own compiler cache as earlier runs on the machine left it (Model Navigator: Inductor's "
             "default folder in the temp folder; Navigator: its seed under ~/.cache/navigator)",
    "cold": "a fresh, empty compiler cache for every run of either tool (a model's first conversion on a new "
            "machine)",
    "warm": "each tool's compiler cache kept across this benchmark's runs, from one untimed run of each tool per "
            "model before the timed ones (a model's second conversion on a machine)",
}


def cache_env(env: dict, kind: str, caches: str, tmp: Path, ws: Path) -> None:
    """Point a tool's torch.compile cache where ``caches`` says (Navigator keeps its runs' caches
    private and starts them from its seed, so it is moved through NAVIGATOR_CACHE)."""
    if caches == "as-is":
        return
    folder = (ws if caches == "cold" else tmp) / f"{kind}-compile-cache"
    if kind == "nav":
        env["NAVIGATOR_CACHE"] = str(folder)
        env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    else:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(folder)


def loadavg() -> float | None:
    """The 1-minute load average (other jobs on the machine make every figure noisy)."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def summarize_nav(workdir: Path) -> dict:
    import yaml

    out = {"pairs": 0, "verified": 0, "profiled": 0, "best": None, "formats": {}}
    status_files = list(workdir.glob("*.nav.workspace/status.yaml"))
    if not status_files:
        return out
    st = yaml.safe_load(status_files[0].read_text())
    stages = {"convert": 0.0, "verify": 0.0, "load": 0.0, "profile": 0.0}
    for key, fs in (st.get("formats") or {}).items():
        stages["convert"] += (fs.get("convert") or {}).get("duration_s") or 0.0
        for rkey, rs in (fs.get("runners") or {}).items():
            stages["verify"] += (rs.get("verify") or {}).get("duration_s") or 0.0
            stages["load"] += (rs.get("verify") or {}).get("load_s") or 0.0
            stages["profile"] += (rs.get("profile") or {}).get("duration_s") or 0.0
            out["pairs"] += 1
            v = rs.get("verify", {}).get("status")
            p = rs.get("profile", {}).get("status")
            out["verified"] += v == "ok"
            out["profiled"] += p == "ok"
            out["formats"][f"{key}/{rkey}"] = {"convert": fs.get("convert", {}).get("status"), "verify": v,
                                               "profile": p}
    out["stages"] = stages
    best = st.get("best") or {}
    if best.get("throughput"):
        out["best"] = (f"{best['key']}/{best['runner']}", best["throughput"], best.get("batch_size"))
    return out


def summarize_mn(workspace: Path) -> dict:
    """Model Navigator's status.yaml: a (format, runner) pair is verified when Correctness
    and VerifyModel (our verify_func, atol/rtol as for Navigator) are OK, profiled when
    Performance is OK."""
    import yaml

    out = {"pairs": 0, "verified": 0, "profiled": 0, "best": None, "formats": {}}
    path = workspace / "status.yaml"
    if not path.exists():
        return out
    st = yaml.safe_load(path.read_text())
    best = None
    for key, ms in (st.get("models_status") or {}).items():
        for rname, rs in (ms.get("runners_status") or {}).items():
            status = rs.get("status") or {}
            out["pairs"] += 1
            verified = status.get("Correctness") == "OK" and status.get("VerifyModel") == "OK"
            profiled = status.get("Performance") == "OK"
            out["verified"] += verified
            out["profiled"] += profiled
            out["formats"][f"{key}/{rname}"] = {k: v for k, v in status.items()}
            perf = ((rs.get("result") or {}).get("Performance") or {}).get("profiling_results") or []
            for r in perf:
                thr = r.get("throughput")
                if verified and thr and (best is None or thr > best[1]):
                    best = (f"{key}/{rname}", thr, r.get("batch_size"))
    out["best"] = best
    return out


# --------------------------------------------------------------------------- pick accuracy
NAV_KINDS = {"torch-cpu": ("eager", None), "torch_compile-cpu": ("compile", None)}
MN_FORMATS = {"torchscript-script": ("torchscript", "model.pt"), "torchscript-trace": ("torchscript", "model.pt"),
              "torch-exportedprogram": ("export", "model.pt2"), "onnx": ("onnx", "model.onnx")}


def candidates_of(row: dict) -> dict:
    """{candidate name: (kind, artifact path or None)} of the pairs a run verified. The source's own
    runners (eager, torch.compile) are one candidate for both tools; each tool's exported artifacts are
    candidates of their own (a slower export of the same format is what its user gets)."""
    import yaml

    ws = Path(row["log"]).parent / "workspace"
    out = {}
    if row["tool"].startswith("nav"):
        files = list(ws.glob("*.nav.workspace/status.yaml"))
        if not files:
            return out
        st = yaml.safe_load(files[0].read_text())
        for key, fs in (st.get("formats") or {}).items():
            for rkey, rs in (fs.get("runners") or {}).items():
                if (rs.get("verify") or {}).get("status") != "ok":
                    continue
                if key == "torch":
                    kind, path = NAV_KINDS.get(rkey, (None, None))
                    if kind:
                        out[kind] = (kind, None)
                    continue
                art = fs.get("path")
                path = files[0].parent / art if art else None
                kind = {"torchscript": "torchscript", "torch_export": "export"}.get(fs.get("format"), "onnx")
                if fs.get("format") in ("torchscript", "torch_export", "onnx") and path is not None:
                    out[f"nav:{key}" if row["model"] != "onnx" else "onnx"] = (kind, str(path))
        return out
    path = ws / "status.yaml"
    if not path.exists():
        return out
    st = yaml.safe_load(path.read_text())
    for key, ms in (st.get("models_status") or {}).items():
        for rname, rs in (ms.get("runners_status") or {}).items():
            status = rs.get("status") or {}
            if not (status.get("Correctness") == "OK" and status.get("VerifyModel") == "OK"):
                continue
            if key == "torch":
                kind = {"TorchCPU": "eager", "TorchCompileCPU": "compile"}.get(rname)
                if kind:
                    out[kind] = (kind, None)
            elif key in MN_FORMATS:
                kind, file = MN_FORMATS[key]
                out[f"mn:{key}" if row["model"] != "onnx" else "onnx"] = (kind, str(ws / key / file))
    return out


def pick_of(row: dict) -> str | None:
    """The candidate name of a run's best."""
    best = row.get("best")
    if not best:
        return None
    key, runner = best[0].split("/", 1)
    if row["model"] == "onnx":
        return "onnx"
    if row["tool"].startswith("nav"):
        return NAV_KINDS.get(runner, (None,))[0] if key == "torch" else f"nav:{key}"
    if key == "torch":
        return {"TorchCPU": "eager", "TorchCompileCPU": "compile"}.get(runner)
    return f"mn:{key}"


def run_oracle(model: str, rows: list[dict], python: Path, script: Path) -> dict:
    """Every candidate the runs of ``model`` verified, measured in interleaved rounds (see ORACLE_CHILD)."""
    kind, spec, _ = MODELS[model]
    candidates: dict = {}
    for r in rows:
        r["candidates"] = candidates_of(r)
        r["pick"] = pick_of(r)
        for name, (k, path) in r["candidates"].items():
            candidates.setdefault(name, {"name": name, "kind": k, "path": path})
    if kind == "onnx":
        candidates = {"onnx": {"name": "onnx", "kind": "onnx", "path": str(ROOT / spec)}}
    args = {"model": model, "root": str(ROOT), "spec": spec, "candidates": list(candidates.values()),
            "batches": ORACLE_BATCHES, "rounds": ORACLE_ROUNDS, "window_s": ORACLE_WINDOW_S}
    start = time.perf_counter()
    proc = subprocess.run([str(python), str(script), json.dumps(args)], capture_output=True, text=True, cwd=ROOT)
    found = re.search(r"^NAVBENCH_ORACLE (.*)$", proc.stdout, flags=re.M)
    if not found:
        return {"error": (proc.stderr or proc.stdout)[-800:], "wall_s": time.perf_counter() - start}
    data = json.loads(found.group(1))
    data["wall_s"] = time.perf_counter() - start
    data["load"] = loadavg()
    return data


def oracle_figures(data: dict) -> dict:
    """{candidate: (peak median throughput, its batch, q1, q3)} from the per-round windows."""
    out = {}
    for name, by_batch in (data.get("throughput") or {}).items():
        best = None
        for b, values in by_batch.items():
            if not values:
                continue
            q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
            med = statistics.median(values)
            if best is None or med > best[0]:
                best = (med, int(b), q[0], q[2])
        if best:
            out[name] = best
    return out


def judge(row: dict, figures: dict) -> dict:
    """Was the run's pick the fastest candidate within the oracle's noise (the pick's upper quartile
    reaches the fastest's lower quartile), among all candidates and among the run's own verified ones?"""
    pick = row.get("pick")
    if not figures:
        return {}
    fastest = max(figures, key=lambda n: figures[n][0])
    own = [n for n in row.get("candidates", {}) if n in figures]
    own_fastest = max(own, key=lambda n: figures[n][0]) if own else None
    if pick not in figures:
        return {"fastest": fastest, "own_fastest": own_fastest, "right_all": False, "right_own": False, "ratio": None}
    p = figures[pick]
    return {"fastest": fastest, "own_fastest": own_fastest, "ratio": p[0] / figures[fastest][0],
            "right_all": p[3] >= figures[fastest][2],
            "right_own": own_fastest is not None and p[3] >= figures[own_fastest][2]}


def pick_lines(oracles: dict, rows: list[dict]) -> list[str]:
    lines = []
    for model, data in oracles.items():
        if data.get("error"):
            lines += [f"- {model}: the oracle failed: `{data['error'][-300:]}`", ""]
            continue
        figures = oracle_figures(data)
        lines += [f"**{model}** (oracle {data['wall_s']:.0f} s, load {data.get('load')}; "
                  f"{ORACLE_ROUNDS} interleaved rounds of {ORACLE_WINDOW_S:g} s windows at batch sizes "
                  f"{', '.join(map(str, ORACLE_BATCHES))}):", "",
                  "| candidate | peak throughput /s (median of rounds) | at batch | IQR / median |", "|---|---|---|---|"]
        for name, (med, b, q1, q3) in sorted(figures.items(), key=lambda kv: -kv[1][0]):
            lines.append(f"| {name} | {med:,.0f} | {b} | {(q3 - q1) / med:.2f} |")
        for name, err in (data.get("errors") or {}).items():
            what = "measured at the other batch sizes only" if name.endswith("(some batch sizes)") else \
                "not loadable here"
            lines.append(f"| {name} | {what}: {err[:120]} | | |")
        lines += ["", "| tool | run's pick | oracle: pick / fastest | right among all | right among its own verified |",
                  "|---|---|---|---|---|"]
        for r in rows:
            if r["model"] != model:
                continue
            j = judge(r, figures)
            r["judged"] = j
            ratio = f"{j['ratio']:.2f}" if j.get("ratio") is not None else "n/a"
            lines.append(f"| {r['tool']} | {r.get('pick') or '-'} | {ratio} | {'yes' if j.get('right_all') else 'no'} | "
                         f"{'yes' if j.get('right_own') else 'no'} (fastest: {j.get('own_fastest')}) |")
        lines.append("")
    tally = {}
    for r in rows:
        j = r.get("judged")
        if j is None:
            continue
        t = tally.setdefault(r["tool"], [0, 0, 0])
        t[0] += 1
        t[1] += bool(j.get("right_all"))
        t[2] += bool(j.get("right_own"))
    for tool, (n, right_all, right_own) in tally.items():
        lines.append(f"- `{tool}`: right among all candidates {right_all}/{n}, among its own verified {right_own}/{n}.")
    return lines


# --------------------------------------------------------------------------- report
def table(rows: list[dict]) -> list[str]:
    header = "| model | tool | wall s | CPU s | verified | profiled | best (format/runner) | throughput /s @ batch | " \
             "process starts (python + other) | load avg before | Navigator / mn-fair |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    by_model: dict[str, list[dict]] = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    for model, rs in by_model.items():
        fair = [r["wall_s"] for r in rs if r["tool"] == "mn-fair"]
        for r in rs:
            best = r["best"]
            ratio = ""
            if r["tool"].startswith("nav") and fair:
                ratio = f"{r['wall_s'] / statistics.median(fair):.2f}"
            e = r["execs"]
            starts = f"{e['total']} ({e['python']} + {e['other']})" if e["total"] is not None else "n/a"
            lines.append(f"| {model} | {r['tool']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                         f"{r['verified']}/{r['pairs']} | "
                         f"{r['profiled']}/{r['pairs']} | {best[0] if best else '-'} | "
                         f"{f'{best[1]:,.0f} @ {best[2]}' if best else '-'} | {starts} | "
                         f"{r['load'] if r['load'] is not None else ''} | {ratio} |")
    return lines


def breakdown(rows: list[dict]) -> list[str]:
    """Where a Navigator run's wall time went. Phases from the run's own timings: prepare (open the
    source, samples, reference in the calling process), the convert + verify phase (format workers,
    in parallel unless nav-seq), the race (the profiling worker; nav-seq profiles inside the format
    workers, so its profiling is in the convert + verify phase), and the rest (interpreter start,
    imports, choosing best, writing the record). Then the sums of the recorded step durations
    (verify includes loading the runner, e.g. torch.compile's compile; sums of parallel steps can
    exceed their phase's wall time)."""
    header = ("| model | tool | wall s | prepare s | convert + verify phase s | race s | rest s | "
              "step sums: convert s | verify s (of it loading) | profile s |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        st = r.get("stages")
        if not st:
            continue
        t = r.get("timings") or {}
        phases = [t.get("prepare_s"), t.get("formats_s"), t.get("race_s")]
        shown = [f"{v:.1f}" if v is not None else "n/a" for v in phases]
        rest = r["wall_s"] - sum(v for v in phases if v is not None)
        lines.append(f"| {r['model']} | {r['tool']} | {r['wall_s']:.1f} | {' | '.join(shown)} | {rest:.1f} | "
                     f"{st['convert']:.1f} | {st['verify']:.1f} ({st['load']:.1f}) | {st['profile']:.1f} |")
    return lines


def summary_lines(rows: list[dict]) -> list[str]:
    """Per model: Navigator / mn-fair on the median and on the minimum wall time (the least
    disturbed run, when other work shares the machine), and on the median CPU time."""
    lines = []
    for model in dict.fromkeys(r["model"] for r in rows):
        pick = {t: [r for r in rows if r["model"] == model and r["tool"] == t and r["returncode"] == 0]
                for t in ("mn", "mn-fair", "nav", "nav-seq", "nav-eq")}
        if not pick["nav"] or not pick["mn-fair"]:
            continue
        wall = {t: [r["wall_s"] for r in rs] for t, rs in pick.items() if rs}
        cpu = {t: [r["cpu_s"] for r in rs] for t, rs in pick.items() if rs}
        med = {t: statistics.median(w) for t, w in wall.items()}
        low = {t: min(w) for t, w in wall.items()}
        shipped = f", as shipped {med['mn']:.1f} s" if "mn" in med else ""
        lines.append(f"- {model}: Navigator {med['nav']:.1f} s median / {low['nav']:.1f} s min over "
                     f"{len(wall['nav'])} runs; Model Navigator comparable {med['mn-fair']:.1f} / "
                     f"{low['mn-fair']:.1f} s{shipped}. Navigator / comparable: **{med['nav'] / med['mn-fair']:.2f}** "
                     f"on medians, {low['nav'] / low['mn-fair']:.2f} on minima, "
                     f"{statistics.median(cpu['nav']) / statistics.median(cpu['mn-fair']):.2f} on CPU time.")
        if "nav-seq" in med:
            lines.append(f"  Navigator before #20 (`nav-seq`: one format at a time, full profile sweeps, no race): "
                         f"{med['nav-seq']:.1f} s median; now / before: **{med['nav'] / med['nav-seq']:.2f}**.")
        if "nav-eq" in med:
            lines.append(f"  With Model Navigator's profiling window (25 inferences, `nav-eq`): {med['nav-eq']:.1f} s "
                         f"median / {low['nav-eq']:.1f} s min, **{med['nav-eq'] / med['mn-fair']:.2f}** of the "
                         f"comparable on medians, {low['nav-eq'] / low['mn-fair']:.2f} on minima.")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="cnn,transformer,onnx", help="comma-separated: cnn, transformer, onnx")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of mn, nav, mn-fair, nav per model")
    parser.add_argument("--mn-venv", type=Path, default=DEFAULT_VENV, help="Model Navigator's venv (built if missing)")
    parser.add_argument("--tools", default=",".join(dict.fromkeys(TOOLS)), help="a subset of mn, nav, mn-fair")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "vs_model_navigator_cpu.md")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument("--keep", action="store_true", help="keep the workspaces (their folder is printed)")
    parser.add_argument("--no-oracle", action="store_true", help="skip the pick-accuracy measurement")
    parser.add_argument("--no-count-starts", action="store_true",
                        help="skip the extra run under strace that counts each tool's process starts")
    parser.add_argument("--caches", choices=sorted(CACHES), default="as-is",
                        help="the tools' torch.compile caches: " + "; ".join(f"{k}: {v}" for k, v in CACHES.items()))
    args = parser.parse_args()

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in models if m not in MODELS]
    if bad:
        parser.error(f"unknown model {bad[0]!r}; known: {', '.join(MODELS)}")
    wanted = {t.strip() for t in args.tools.split(",")}
    mn_python = ensure_mn_venv(args.mn_venv.expanduser())
    ensure_bytecode(ROOT)
    tmp = Path(tempfile.mkdtemp(prefix="navbench-"))
    scripts = {"mn": tmp / "mn_child.py", "nav": tmp / "nav_child.py"}
    scripts["mn"].write_text(MN_CHILD % (ATOL, RTOL))
    scripts["nav"].write_text(NAV_CHILD % (ATOL, RTOL))
    scripts["eq"] = tmp / "equal_windows"
    install_hooks(scripts["eq"], pth=False)
    pythons = {"mn": mn_python, "nav": Path(sys.executable)}
    scripts["oracle"] = tmp / "oracle_child.py"
    scripts["oracle"].write_text(ORACLE_CHILD)
    rows: list[dict] = []
    oracles: dict = {}
    counts = not args.no_count_starts and shutil.which("strace") is not None
    counted: dict = {}
    try:
        for model in models:
            if args.caches == "warm":
                for tool in {t for t in TOOLS if t in wanted}:
                    r = run_tool(tool, model, pythons, scripts, tmp, caches="warm")
                    print(f"{model:<12} {tool:<8} {r['wall_s']:7.1f} s  (untimed: warms its cache)", flush=True)
            for _ in range(args.rounds):
                for tool in TOOLS:
                    if tool not in wanted:
                        continue
                    r = run_tool(tool, model, pythons, scripts, tmp, caches=args.caches)
                    if counts and (model, tool) not in counted:   # one run under strace for the process starts
                        counted[(model, tool)] = run_tool(tool, model, pythons, scripts, tmp, trace=True,
                                                          caches=args.caches)["execs"]
                    r["execs"] = counted.get((model, tool), r["execs"])
                    rows.append(r)
                    best = r["best"]
                    print(f"{model:<12} {tool:<8} {r['wall_s']:7.1f} s  exit {r['returncode']}  verified "
                          f"{r['verified']}/{r['pairs']}  profiled {r['profiled']}/{r['pairs']}  starts "
                          f"{r['execs']['total']}  best {best[0] if best else '-'}", flush=True)
                    if r["returncode"] != 0:
                        print(f"    (see {r['log']})", flush=True)
            if not args.no_oracle:   # while the runs' workspaces are there
                oracles[model] = run_oracle(model, [r for r in rows if r["model"] == model], pythons["nav"],
                                            scripts["oracle"])
                print(f"{model:<12} oracle   {oracles[model]['wall_s']:7.1f} s", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"workspaces kept in {tmp}")
    lines = table(rows)
    print("\n" + "\n".join(lines))
    parts = breakdown(rows)
    print("\n" + "\n".join(parts))
    summary = summary_lines(rows)
    print("\n".join(summary))
    picks = pick_lines(oracles, rows)
    print("\n".join(picks))
    if args.no_write:
        return
    mach = machine()
    nav_v = _versions(Path(sys.executable), ["navigator", "torch", "onnx", "onnxruntime", "numpy", "polygraphy"])
    mn_v = _versions(mn_python, ["triton-model-navigator", "torch", "onnx", "onnxruntime", "numpy", "polygraphy"])
    text = ["# Navigator vs Triton Model Navigator 0.14 on a CPU", "",
            f"Written by `benchmarks/vs_model_navigator.py --models {','.join(models)} --rounds {args.rounds} "
            f"--caches {args.caches}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
            f"Compiler caches ({args.caches}): {CACHES[args.caches]}.", "",
            f"Machine: {mach['cpu']}, {mach['cores']} cores, {mach['ram_gib']:.1f} GiB RAM, Python {mach['python']}, "
            f"{mach['os']}, no GPU.", "",
            "Versions: Navigator venv " + ", ".join(f"{k} {v}" for k, v in nav_v.items()) + "; Model Navigator venv "
            + ", ".join(f"{k} {v}" for k, v in mn_v.items()) + ".", "",
            "Models and samples (the same two batches for both tools): "
            + "; ".join(f"`{m}` = {MODELS[m][1]} ({MODELS[m][2]})" for m in models) + ".", "",
            "Targets: torch sources -> torchscript, torch.export (ExportedProgram), onnx, besides the source's own "
            "eager and torch.compile runners; Model Navigator's TorchScript target makes two variants by default "
            "(script and trace), Navigator traces and adds onnx-optimized (its default set for a torch source): six "
            "(format, runner) pairs each. The ONNX file -> its onnx runner (one pair each).", "",
            "Tools: `mn` = Model Navigator as shipped (target_device CPU); `mn-fair` = the same with "
            "`torch.cuda.synchronize` a no-op (a .pth hook in the benchmark's own venv) and `autocast=False` in "
            "TorchConfig, TorchScriptConfig and TorchExportConfig; `nav` = Navigator (`navigator.convert` on the live "
            "module or the file); `nav-eq` = Navigator with Model Navigator's profiling window (25 inferences, no "
            "minimum duration, set through a sitecustomize on that run's PYTHONPATH; Navigator's own window is "
            ">= 10 inferences and >= 0.1 s or 1,000 inferences); `nav-seq` = Navigator as before issue #20 (`no_race=True, jobs=1`: one "
            "format at a time, each profiled to full depth in a fresh worker; its profiling windows are today's). Verified = (format, runner) pairs whose outputs pass atol 1e-5 / "
            "rtol 1e-4 "
            "(Navigator's own check; Model Navigator's Correctness + VerifyModel with that verify_func); profiled = "
            "pairs with a throughput result. Profiling: each tool's defaults with max batch size 64 "
            "(see the script's docstring).", "",
            "Process starts: successful execve calls in the tool's process tree (`strace -f --seccomp-bpf -e "
            "trace=execve`), excluding the tool process itself; python interpreters + other programs (torch.compile "
            "runs the C++ compiler), from one extra run per (model, tool) under strace whose times are not used "
            "(strace made torch inference 2-3x slower). Wall time: the tool process, not traced. CPU s: user + "
            "system time of the "
            "tool's process tree. Load avg before: /proc/loadavg (1 min) as the run started; other jobs on the machine "
            "make wall times and throughputs noisy, so the summary gives medians and minima.", "",
            *lines, "", *summary, "", "## Where Navigator's time goes", "",
            "Phases from each Navigator run's own timings: prepare (source, samples, reference in the calling "
            "process), the convert + verify phase (format workers; in parallel except `nav-seq`, whose profiling "
            "happens in this phase), the race (the profiling worker), rest = wall - the phases (interpreter start, "
            "imports, best, record). Then the sums of the step durations in status.yaml (verify includes loading "
            "the runner, e.g. the torch.compile compile; parallel steps' sums can exceed their phase).", "",
            *parts, "", "## Pick accuracy", "",
            "After each model's runs, an oracle (one process in Navigator's venv; torch and onnxruntime are the same "
            "releases in both venvs) loads every artifact either tool verified (each tool's own TorchScript, "
            "ExportedProgram and ONNX files; the source module eager and under torch.compile, shared) and measures "
            f"them in {ORACLE_ROUNDS} rounds, each round one {ORACLE_WINDOW_S:g} s window per (candidate, batch size) "
            "in a shuffled order, so machine drift hits all alike; each window follows 0.1 s of unmeasured running "
            "(a runner measured right after another ran at half speed for ~50 ms). A candidate's figure is the median over rounds at "
            "its best batch size; a run's pick is right when the pick's upper quartile reaches the fastest "
            "candidate's lower quartile (within the measured noise), judged among all candidates and among the "
            "run's own verified ones (a tool cannot pick what it did not verify).", "",
            *picks, ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(text))
    print(f"\nwritten: {args.out}")


if __name__ == "__main__":
    main()
