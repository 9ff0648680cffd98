"""PyTorch runners: eager, torch.compile, TorchScript, ExportedProgram, AOTInductor.

All take flat tensors in the order of ``options["inputs"]`` (the artifact's
input names) and return ``{name: ndarray}`` in the order of
``options["outputs"]``. On ``cpu`` no CUDA call is made, so CPU-only torch
builds work; on ``cuda`` a missing GPU is ``skipped``, not ``failed``.

On CUDA, modules with 4-D weights (convolutions) run channels-last, with 4-D
inputs made channels-last too (tensor-core convolutions want NHWC; the values
are the same, only the strides change), and cuDNN picks its algorithms by
benchmark. AOTInductor packages and TorchScript modules keep the layout they
were compiled or traced with. For profiling, :meth:`_TorchRunner.profiling_infer`
keeps the inputs on the GPU and leaves the outputs there (``io: device``, as
``trtexec --noDataTransfers``); verification always goes host to host.
"""

from __future__ import annotations

import time
from pathlib import Path

from navigator.runners.base import Runner, RunnerUnavailable


class _TorchRunner(Runner):
    requires = ("torch",)

    def activate_impl(self) -> None:
        import torch

        if self.device == "cuda" and not torch.cuda.is_available():
            raise RunnerUnavailable("torch has no CUDA device here (CPU-only build or no GPU)")
        if self.device == "cuda" and self.options.get("precision", "fp32") == "fp32":
            # fp32 means fp32: TF32 convolutions/matmuls (cuDNN's default) are a precision change
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
        if self.device == "cuda":
            torch.backends.cudnn.benchmark = True
        self._torch = torch
        self._channels_last = False
        self.input_names = list(self.options.get("inputs") or [])
        self.output_names = list(self.options.get("outputs") or [])
        start = time.perf_counter()
        self.fn = self.load()
        self.load_s = time.perf_counter() - start

    def load(self):
        raise NotImplementedError

    def _layout(self, module):
        """Channels-last on CUDA for modules with 4-D weights (see the module docstring)."""
        torch = self._torch
        if self.device == "cuda" and any(p.dim() == 4 for p in module.parameters()):
            module = module.to(memory_format=torch.channels_last)
            self._channels_last = True
        return module

    def _tensor(self, array):
        t = self._torch.from_numpy(array).to(self.device)
        if self._channels_last and t.dim() == 4:
            t = t.contiguous(memory_format=self._torch.channels_last)
        return t

    def profiling_infer(self):
        """``(infer, io)`` for the profiler. On CUDA: each feeds dict is copied to the GPU
        once, every call runs the model on those tensors and synchronizes, and no output
        is copied back (``io: device``). Elsewhere: :meth:`infer` itself (``io: host``)."""
        if self.device != "cuda":
            return self.infer, "host"
        torch = self._torch
        held: dict = {}

        def infer(feeds: dict) -> None:
            if held.get("feeds") is not feeds:
                held["feeds"] = feeds
                held["args"] = tuple(self._tensor(feeds[n]) for n in self.input_names)
            with torch.inference_mode():
                self.fn(*held["args"])
            torch.cuda.synchronize()

        return infer, "device"

    def infer_impl(self, feeds: dict) -> dict:
        torch = self._torch
        args = tuple(self._tensor(feeds[n]) for n in self.input_names)
        with torch.inference_mode():
            out = self.fn(*args)
        if isinstance(out, torch.Tensor):
            out = (out,)
        if self.device == "cuda":
            torch.cuda.synchronize()
        result = {}
        for name, t in zip(self.output_names, out):
            t = t.detach().to("cpu")
            result[name] = (t.float() if t.dtype == torch.bfloat16 else t).numpy()
        return result

    def deactivate_impl(self) -> None:
        del self.fn
        if self.device == "cuda":
            self._torch.cuda.empty_cache()


class TorchEagerRunner(_TorchRunner):
    """The source module itself (rebuilt from its factory, or the live one in this process)."""

    name = "torch"

    def module(self):
        from navigator.sources import torch_support as ts

        try:
            module, _, record = ts.workspace_module(Path(self.path).parent.parent.parent, self.options.get("live"))
        except ts.LiveModuleUnavailable as e:
            raise RunnerUnavailable(e.one_line()) from None
        if record.get("dtype"):   # a reduced-precision variant (torch-fp16 / torch-bf16)
            module = ts.cast_module(module, record["dtype"])
        return self._layout(module.to(self.device))

    def load(self):
        return self.module()


class TorchCompileRunner(TorchEagerRunner):
    """torch.compile of the source module; the compile time is ``load_s`` (measured on a
    first inference of the stored sample), apart from inference."""

    name = "torch_compile"

    def load(self):
        from navigator.workspace import npz
        from navigator.workspace.layout import Workspace

        compiled = self._torch.compile(self.module(), mode=self.options.get("compile_mode") or None)
        sample = npz.load(Workspace(Path(self.path).parent.parent.parent).input_files()[0])
        self.fn = compiled
        self.infer_impl({n: sample[n] for n in self.input_names})   # compiles
        return compiled


class TorchScriptRunner(_TorchRunner):
    name = "torchscript"

    def load(self):
        module = self._torch.jit.load(str(self.path), map_location=self.device)
        return module.eval()


class TorchExportRunner(_TorchRunner):
    name = "torch_export"

    def load(self):
        return self._layout(self._torch.export.load(str(self.path)).module().to(self.device))


class AotiRunner(_TorchRunner):
    """An AOTInductor package runs on the device it was compiled for."""

    name = "aoti"

    def load(self):
        import torch._inductor

        compiled_for = self.options.get("compiled_for")
        if compiled_for and compiled_for != self.device:
            raise RunnerUnavailable(f"this AOTInductor package was compiled for {compiled_for}, not {self.device}")
        if self.device == "cuda":
            # A fresh process has no CUDA context yet; load into an initialised device
            # (a fresh-process load segfaulted on H100 otherwise, ENVIRONMENT.md).
            torch.cuda.init()
            torch.empty(1, device="cuda")
            return torch._inductor.aoti_load_package(str(self.path), device_index=torch.cuda.current_device())
        return torch._inductor.aoti_load_package(str(self.path))
