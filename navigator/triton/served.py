"""What a format's verdict depended on, as the Triton config serves it: the dynamic batcher and its
preferred sizes (from the profile), the CUDA provider options, the graph optimisation level and
OpenVINO's precision each runner was verified with; CUDA graphs, ONNX Runtime's TensorRT accelerator
and the response cache where asked for."""

from __future__ import annotations

import os

from navigator.errors import UserInputError
from navigator.triton import backends, python_backend
from navigator.triton.config import ModelPlan
from navigator.triton.options import TritonOptions
from navigator.workspace.status import peak_of

_MIN_SIZES = 3       # preferred batch sizes: profiled sizes needed to call a peak an optimum ...
_MIN_DROP = 0.05     # ... and how much lower (at least) a larger size must be


def preferred_sizes(fs, kind: str, max_batch_size: int) -> tuple[list[int], str]:
    """(preferred batch sizes, why none) from the in-process profile of the runner that
    matches the instance kind (CUDA runners for GPU instances, CPU ones for CPU).

    A preferred size caps the batches the dynamic batcher forms while requests queue, so it
    is set only where a profile found a real optimum: at least three sizes measured, the
    peak at a size above the smallest, and a larger size measured whose throughput is lower
    by more than the measurement noise (each point's recorded spread, at least 5%). Anything
    else leaves it out (Triton then batches up to max_batch_size); the reason is returned."""
    want = {"KIND_GPU": ("cuda",), "KIND_CPU": ("cpu",)}.get(kind, ("cuda", "cpu"))
    candidates = [rs for rs in fs.runners.values()
                  if rs.verify.status == "ok" and rs.profile.status == "ok" and rs.profile.results]
    matching = next(([rs for rs in candidates if rs.device == d] for d in want
                     if any(rs.device == d for rs in candidates)), [])
    if not matching:
        return [], f"no in-process profile of a {' or '.join(want)} runner"
    best = max(matching, key=lambda rs: rs.profile.peak().throughput)
    results = sorted((r for r in best.profile.results if r.batch_size <= max_batch_size), key=lambda r: r.batch_size)
    sizes = [r.batch_size for r in results]
    if len(sizes) < _MIN_SIZES:
        return [], (f"the profile of {best.runner} measured batch size{'s' if len(sizes) != 1 else ''} "
                    f"{', '.join(map(str, sizes)) or 'none'} only (at least {_MIN_SIZES} are needed to find an "
                    "optimum)")
    peak = peak_of(results, lambda r: r.raced, lambda r: r.throughput)   # a raced figure is the peak
    if peak.batch_size == sizes[0]:
        return [], (f"throughput peaks at the smallest size measured, {peak.batch_size} (a preferred size there "
                    "would stop batching)")
    larger = [r for r in results if r.batch_size > peak.batch_size]
    if not larger:
        return [], (f"throughput still rises at the largest size measured, {peak.batch_size}: no optimum inside "
                    "the range")

    def noise(r) -> float:
        return max(_MIN_DROP, r.spread or 0.0)

    if not all(r.throughput < peak.throughput * (1.0 - max(noise(r), noise(peak))) for r in larger):
        return [], (f"throughput plateaus from batch {peak.batch_size} (larger sizes within the measurement noise): "
                    "no optimum to prefer")
    return [peak.batch_size], ""


def _cuda_accelerator(plan: ModelPlan) -> dict[str, str]:
    """The parameters of the plan's one ``cuda`` GPU accelerator (added when missing)."""
    for name, params in plan.gpu_accelerators:
        if name == "cuda":
            return params
    plan.gpu_accelerators.append(("cuda", {}))
    return plan.gpu_accelerators[-1][1]


def _served_cuda_variant(plan: ModelPlan, fs, key: str, notes: list[str]) -> None:
    """Serve an ONNX model on GPU with the CUDA provider options its verification ran with:
    TF32 off (the backend's default is on, which an fp32 verdict never saw), and
    ``prefer_nhwc`` when ``onnxruntime-cuda_nhwc`` is its fastest verified CUDA runner, ranked as
    best ranks pairs (:func:`navigator.execution.racing.ranking`: one the race dropped ranks below
    those it kept, whatever its frozen figure)."""
    from navigator.execution import racing
    from navigator.runners.onnxruntime import cuda_provider_options

    runs = [rs for rs in fs.runners.values()
            if rs.runner == "onnxruntime" and rs.device == "cuda" and rs.provider in (None, "cuda", "cuda_nhwc")
            and rs.verify.status == "ok"]
    placed = [(rs, *racing.placed(rs.profile)) for rs in runs]
    keys = racing.ranking([(peak.throughput if peak else 0.0, where) for _, peak, where in placed])
    fastest, top, _ = max(zip(keys, placed), key=lambda kp: kp[0], default=(None, (None, None, None)))[1]
    provider = fastest.provider if fastest is not None else None
    params = _cuda_accelerator(plan)
    for k, v in cuda_provider_options(provider).items():
        if k != "device_id":   # the backend places each instance on its own device
            params[k] = str(v)
    if provider == "cuda_nhwc":
        notes.append(f"{key}: onnxruntime's CUDA provider with prefer_nhwc, as onnxruntime-cuda_nhwc verified it "
                     f"and measured it fastest ({top.throughput if top else 0.0:.1f}/s)")


# onnxruntime's graph optimisation levels as Triton's onnxruntime backend reads optimization.graph.level
# (src/onnxruntime.cc: unset or any other value is ORT_ENABLE_ALL)
_GRAPH_LEVELS = {"basic": -1, "extended": 1, "disabled": 2}


def _served_graph_level(plan: ModelPlan, fs, key: str, notes: list[str]) -> None:
    """The graph optimisation level the verified onnxruntime runner used, when it is not the
    backend's default (all)."""
    levels = {(rs.verify.settings or {}).get("graph_optimization_level") for rs in fs.runners.values()
              if rs.runner == "onnxruntime" and rs.verify.status == "ok"} - {None, "all"}
    if len(levels) == 1:
        level = levels.pop()
        plan.graph_level = _GRAPH_LEVELS[level]
        notes.append(f"{key}: onnxruntime graph optimisation level {level}, as it was verified")


def _served_openvino_precision(fs, key: str, notes: list[str]) -> None:
    """Triton's OpenVINO backend cannot pin f32 (its one precision key is HINT_BF16): say which
    precision it serves on this CPU and which verdict covers it."""
    default = fs.runners.get("openvino-default")
    if default is None or default.verify.status == "skipped":
        notes.append(f"{key}: Triton's OpenVINO backend runs the CPU plugin's default precision, f32 on this CPU "
                     "(verified by openvino-cpu); on a CPU with AVX512_BF16 or AMX it would be bf16, not verified "
                     "here")
        return
    precision = (default.verify.settings or {}).get("INFERENCE_PRECISION_HINT", "bf16")
    notes.append(f"{key}: Triton's OpenVINO backend cannot pin f32: on this CPU it serves {precision}, verified as "
                 f"openvino-default ({default.verify.status})")


# our runners' runtime options -> the Triton backend's config parameters of the same meaning (the
# onnxruntime, openvino and pytorch backends' documented ``parameters`` keys), and value spellings
_BACKEND_PARAMETERS = {
    "onnxruntime": {"intra_op_num_threads": "intra_op_thread_count", "inter_op_num_threads": "inter_op_thread_count",
                    "execution_mode": "execution_mode"},
    "openvino": {"performance_hint": "PERFORMANCE_HINT", "num_streams": "NUM_STREAMS",
                 "inference_num_threads": "INFERENCE_NUM_THREADS"},
    "pytorch": {"num_threads": "INTRA_OP_THREAD_COUNT"},
}
_PARAMETER_VALUES = {("onnxruntime", "execution_mode"): {"sequential": "0", "parallel": "1"}}


def _served_runtime_options(plan: ModelPlan, fs, serving: backends.Serving, key: str, notes: list[str]) -> None:
    """The runtime options the profile's tuning kept (and verified) for a runner on the instances'
    device, as the backend's parameters; a backend that cannot be told them is named in a note."""
    device = "cuda" if plan.instance_kind == "KIND_GPU" else "cpu"
    tuned = [(k, rs) for k, rs in fs.runners.items()
             if rs.profile.options and rs.verify.status == "ok" and rs.device == device]
    table = _BACKEND_PARAMETERS.get(serving.backend, {})
    for rkey, rs in tuned:
        options = rs.profile.options
        shown = ", ".join(f"{k}={v}" for k, v in sorted(options.items()))
        if plan.python or not set(options) <= set(table):
            notes.append(f"{key}: {rkey} was fastest with {shown} (its profile's tuning); the {serving.backend} "
                         "backend is not told them and runs its defaults")
            continue
        params = {table[k]: _PARAMETER_VALUES.get((serving.backend, k), {}).get(str(v), str(v))
                  for k, v in options.items()}
        plan.parameters.update(params)
        notes.append(f"{key}: {serving.backend} parameters {', '.join(f'{k}={v}' for k, v in sorted(params.items()))}: "
                     f"{rkey} was measured and verified with {shown} (its profile's tuning)")
        return


def options_for_format(plan: ModelPlan, fs, serving: backends.Serving, opts: TritonOptions, key: str,
                        notes: list[str], *, top: bool) -> None:
    gpu = plan.instance_kind == "KIND_GPU"
    native_onnx = serving.platform == "onnxruntime_onnx"
    plan_file = serving.platform == "tensorrt_plan"
    if plan.sequence is not None:   # the sequence batcher schedules it: no dynamic batcher beside it
        given = [flag for flag, on in (("--priority-levels", opts.priority_levels),
                                       ("--queue-policy", opts.queue_policy),
                                       ("--preferred-batch-sizes", opts.preferred_batch_sizes is not None),
                                       ("--max-queue-delay-us", opts.max_queue_delay_us is not None)) if on]
        if given:
            raise UserInputError(f"{' / '.join(given)} set the dynamic batcher; {key} is stateful and served by the "
                                 "sequence batcher, which excludes it")
    elif plan.max_batch_size > 0 and opts.dynamic_batching or opts.priority_levels or opts.queue_policy:
        db = {}
        if plan.max_batch_size > 0:
            if opts.preferred_batch_sizes:
                sizes = list(opts.preferred_batch_sizes)
            else:
                sizes, why = preferred_sizes(fs, plan.instance_kind, plan.max_batch_size)
                if why:
                    notes.append(f"{key}: no preferred_batch_size ({why}); the dynamic batcher forms batches up to "
                                 f"max_batch_size {plan.max_batch_size}")
            bad = [s for s in sizes if s > plan.max_batch_size]
            if bad:
                raise UserInputError(f"--preferred-batch-sizes: {bad[0]} exceeds max_batch_size "
                                     f"{plan.max_batch_size} of {key}")
            db["preferred"] = sizes
            db["max_queue_delay_us"] = opts.max_queue_delay_us
        if opts.priority_levels:
            db["priority_levels"] = opts.priority_levels
            db["default_priority_level"] = opts.default_priority_level or opts.priority_levels
        db["queue_policy"] = opts.queue_policy
        plan.dynamic_batching = db
    if gpu and native_onnx and not opts.ort_trt_precision:
        _served_cuda_variant(plan, fs, key, notes)
    if native_onnx:
        _served_graph_level(plan, fs, key, notes)
    if serving.backend == "openvino":
        _served_openvino_precision(fs, key, notes)
    _served_runtime_options(plan, fs, serving, key, notes)
    if opts.cuda_graphs:
        if not gpu:
            raise UserInputError(f"--cuda-graphs needs GPU instances: add --kind gpu ({key} would get "
                                 f"{plan.instance_kind})")
        if plan_file:
            plan.cuda_graphs = True
        elif native_onnx and not opts.ort_trt_precision:
            _cuda_accelerator(plan)["enable_cuda_graph"] = "1"
        elif not native_onnx:
            raise UserInputError(f"--cuda-graphs: Triton applies CUDA graphs to TensorRT plans and to ONNX Runtime "
                                 f"on GPU; {key} is served by the {serving.backend} backend")
    if opts.ort_trt_precision:
        if not native_onnx:
            raise UserInputError(f"--ort-trt-precision sets ONNX Runtime's TensorRT accelerator; {key} is served "
                                 f"by the {serving.backend} backend, not onnxruntime")
        if not gpu:
            raise UserInputError(f"--ort-trt-precision needs GPU instances: add --kind gpu ({key} would get "
                                 f"{plan.instance_kind})")
        params = {"precision_mode": opts.ort_trt_precision.upper()}
        if opts.cuda_graphs:
            params["trt_cuda_graph_enable"] = "1"
        plan.gpu_accelerators.append(("tensorrt", params))
    if top and opts.response_cache:
        plan.response_cache = True
    if plan.python and opts.execution_env:
        plan.parameters[python_backend.ENV_PARAMETER] = "$$TRITON_MODEL_DIRECTORY/" + \
            os.path.basename(opts.execution_env)
