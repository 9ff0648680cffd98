"""The built-in formats (ARCHITECTURE.md, "Names"), one record each.

Order of preference for ``best`` without profiles: engines first, then
compiled packages, then portable graphs, then the eager source.
"""

from __future__ import annotations

from navigator.formats.descriptor import PYTHON, Format, RunnerSpec, Serving

CPU, CUDA = "cpu", "cuda"
TORCH_PACKAGES = ("torch",)
# what a worker needs of the fork server's preload (Format.preload): torch itself, or what loading a
# saved ExportedProgram imports
TORCH, PROGRAM = "torch", "torch._inductor.compile_fx"
_GPU_ONLY = "{} run only on an NVIDIA GPU"


def _both(*runners: str) -> dict[str, tuple[RunnerSpec, ...]]:
    return {d: tuple(RunnerSpec(r, d) for r in runners) for d in (CPU, CUDA)}


FORMATS: tuple[Format, ...] = (
    Format(
        "tensorrt", "model.plan", preference=0, fixed_batch=True, precisions=("fp32", "fp16", "int8", "fp8"),
        runners={CPU: (), CUDA: (RunnerSpec("tensorrt", CUDA),)},
        unverifiable={CPU: _GPU_ONLY.format("TensorRT engines")},
        serving=Serving("tensorrt", "tensorrt_plan", "model.plan", devices=("gpu",),
                        note="an engine loads only with the TensorRT version that built it, on the same GPU "
                             "architecture: check it with navigator check-engine PLAN --triton RELEASE"),
        runner_classes={"tensorrt": "navigator.runners.tensorrt:TensorRTRunner"}),
    # TensorRT-RTX builds on a CPU, so a CPU run lists its runner too: the step is
    # skipped with the runner's reason instead of silently absent.
    Format(
        "tensorrt_rtx", "model.plan", preference=1, fixed_batch=True, precisions=("fp32", "fp16", "int8"),
        runners={CPU: (RunnerSpec("tensorrt_rtx", CPU),), CUDA: (RunnerSpec("tensorrt_rtx", CUDA),)},
        not_servable="a TensorRT-RTX engine never loads in Triton's TensorRT backend (another runtime, another "
                     "plan header); serve the tensorrt format, built inside the Triton container with the trtexec "
                     "line of its reproduce.sh, or onnx",
        runner_classes={"tensorrt_rtx": "navigator.runners.tensorrt:TensorRTRTXRunner"}),
    # Torch-TensorRT saves a TorchScript module holding TensorRT engines: the TorchScript runner runs it.
    Format(
        "torch_tensorrt", "model.pt", preference=2, fixed_batch=True, precisions=("fp32", "fp16"),
        runners={CPU: (), CUDA: (RunnerSpec("torchscript", CUDA),)}, preload=TORCH,
        unverifiable={CPU: _GPU_ONLY.format("Torch-TensorRT modules")},
        serving=Serving("pytorch", "pytorch_libtorch", "model.pt", devices=("gpu",), name_convention="pytorch")),
    Format(
        "aoti", "model.pt2", preference=3, fixed_batch=True, compiled_for_device=True,
        precisions=("fp32", "fp16", "bf16"), runners=_both("aoti"), preload=PROGRAM,
        native_opt_in=Serving("pytorch", "torch_aoti", "model.pt2", name_convention="pytorch",
                              note="platform torch_aoti is beta in Triton and needs the exact torch version that "
                                   "compiled the package, on the device it was compiled for"),
        python_loader="aoti", python_packages=TORCH_PACKAGES,
        runner_classes={"aoti": "navigator.runners.torch:AotiRunner"}),
    Format(
        # no tolerance floor: on the zoo's 22 models OpenVINO's fp32 errors are 0.5-1.7x onnxruntime's
        # (benchmarks/results/tolerance_study.md); the scaled fp32 default covers both
        "openvino", "model.xml", companions=("model.bin",), preference=4,
        # openvino-default: the CPU plugin's own precision (bf16 on CPUs that have it), what Triton serves
        runners={CPU: (RunnerSpec("openvino", CPU), RunnerSpec("openvino", CPU, "default", serving_check=True)),
                 CUDA: ()},
        unverifiable={CUDA: "OpenVINO runs on the CPU here (its GPU plugin targets Intel GPUs)"},
        serving=Serving("openvino", "", "model.xml", devices=("cpu",)),
        python_loader="openvino", python_packages=("openvino",), python_devices=("cpu",),
        debug_side="navigator.tools.debug_sides:OpenVINOSide",
        runner_classes={"openvino": "navigator.runners.openvino:OpenVINORunner"}),
    Format(
        "onnx", "model.onnx", preference=5, precisions=("fp32", "fp16", "int8"), source_suffixes=(".onnx",),
        # cuda_nhwc: the CUDA provider with prefer_nhwc (tensor-core convolutions in NHWC)
        runners={CPU: (RunnerSpec("onnxruntime", CPU),),
                 CUDA: (RunnerSpec("onnxruntime", CUDA), RunnerSpec("onnxruntime", CUDA, "cuda_nhwc"),
                        RunnerSpec("onnxruntime", CUDA, "tensorrt"))},
        serving=Serving("onnxruntime", "onnxruntime_onnx", "model.onnx"),
        python_loader="onnx", python_packages=("onnxruntime",),
        default_targets=("onnx", "onnx-optimized", "openvino?"),
        check="navigator.converters.onnx_check:check_artifact", debug_side="navigator.tools.debug_sides:OnnxSide",
        precision_share="navigator.converters.onnx_check:precision_share",
        data_files="navigator.converters.onnx_check:data_files",
        runner_classes={"onnxruntime": "navigator.runners.onnxruntime:OnnxruntimeRunner"}),
    Format(
        "torch_export", "model.pt2", preference=6, precisions=("fp32", "fp16", "bf16"), runners=_both("torch_export"),
        preload=PROGRAM, source_suffixes=(".pt2",),
        python_loader="torch_export", python_packages=TORCH_PACKAGES,
        runner_classes={"torch_export": "navigator.runners.torch:TorchExportRunner"}),
    Format(
        "torchscript", "model.pt", preference=7, runners=_both("torchscript"), preload=TORCH,
        source_suffixes=(".pt", ".pth", ".ts", ".jit", ".torchscript"),
        serving=Serving("pytorch", "pytorch_libtorch", "model.pt", name_convention="pytorch"),
        python_loader="torchscript", python_packages=TORCH_PACKAGES,
        runner_classes={"torchscript": "navigator.runners.torch:TorchScriptRunner"}),
    Format(
        "tf_trt", "model.savedmodel", preference=8, fixed_batch=True,
        runners={CPU: (), CUDA: (RunnerSpec("tensorflow", CUDA),)},
        unverifiable={CPU: _GPU_ONLY.format("TF-TRT engines")},
        serving=Serving("tensorflow", "tensorflow_savedmodel", "model.savedmodel", devices=("gpu",),
                        note="Triton deprecated its TensorFlow backend in 25.03: deploy onnx or tensorrt instead")),
    Format(
        "savedmodel", "model.savedmodel", preference=9, runners=_both("tensorflow"),
        serving=Serving("tensorflow", "tensorflow_savedmodel", "model.savedmodel",
                        note="Triton deprecated its TensorFlow backend in 25.03 and stock containers no longer "
                             "ship it: deploy the onnx format instead (same verified function, served by the ONNX "
                             "Runtime backend that every container has)"),
        default_targets=("savedmodel", "onnx", "onnx-optimized"),
        runner_classes={"tensorflow": "navigator.runners.tensorflow:TensorFlowRunner"}),
    Format(
        "torch", "source.json", companions=("io.json",), preference=10, precisions=("fp32", "fp16", "bf16"),
        # on CUDA, torch.compile also with CUDA graphs, and with max-autotune when asked
        # (--runners torch_compile-max_autotune: minutes of autotuning)
        runners={CPU: (RunnerSpec("torch", CPU), RunnerSpec("torch_compile", CPU)),
                 CUDA: (RunnerSpec("torch", CUDA), RunnerSpec("torch_compile", CUDA),
                        RunnerSpec("torch_compile", CUDA, "cudagraphs"),
                        RunnerSpec("torch_compile", CUDA, "max_autotune", opt_in=True))},
        not_servable="the eager PyTorch source is not an artifact; serve torchscript, torch_export or onnx",
        preload=TORCH,
        default_targets=("torch", "torchscript", "torch_export", "onnx", "onnx-optimized"),
        # AOTInductor takes 10-25 s to compile on a CPU: a default on a GPU only
        cuda_default_targets=("aoti",),
        runner_classes={"torch": "navigator.runners.torch:TorchEagerRunner",
                        "torch_compile": "navigator.runners.torch:TorchCompileRunner"}),
)

__all__ = ["FORMATS", "PYTHON"]
