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

import contextlib
import json
import logging
import time
from pathlib import Path

from navigator.runners.base import Runner, RunnerUnavailable


class _TorchRunner(Runner):
    """Option ``num_threads`` (CPU): torch's intra-op threads while this runner infers; the
    process's own count is restored after each call (other runners share the process)."""

    requires = ("torch",)

    @classmethod
    def tuning_candidates(cls, device: str, provider: str | None, cpus: int) -> list[dict]:
        if device != "cpu":
            return []
        return [{"num_threads": n} for n in sorted({1, cpus // 2} - {0, cpus})] if cpus > 1 else []

    @contextlib.contextmanager
    def _threads(self):
        n = int(self.options.get("num_threads") or 0)
        torch = self._torch
        before = torch.get_num_threads()
        if not n or self.device != "cpu" or n == before:
            yield
            return
        torch.set_num_threads(n)
        try:
            yield
        finally:
            torch.set_num_threads(before)

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
        self._step_begin = None
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
                if self._step_begin:
                    self._step_begin()
                self.fn(*held["args"])
            torch.cuda.synchronize()

        return infer, "device"

    def infer_impl(self, feeds: dict) -> dict:
        torch = self._torch
        args = tuple(self._tensor(feeds[n]) for n in self.input_names)
        with torch.inference_mode(), self._threads():
            if self._step_begin:
                self._step_begin()
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
            module, _, _ = ts.workspace_module(Path(self.path).parent.parent.parent, self.options.get("live"))
        except ts.LiveModuleUnavailable as e:
            raise RunnerUnavailable(e.one_line()) from None
        # the module is the workspace's source; a reduced-precision variant (torch-fp16 / torch-bf16)
        # names its dtype in its own source.json
        own = json.loads(self.path.read_text()) if self.path.is_file() else {}
        if own.get("dtype"):
            module = ts.cast_module(module, own["dtype"])
        return self._layout(module.to(self.device))

    def load(self):
        return self.module()


class TorchCompileRunner(TorchEagerRunner):
    """torch.compile of the source module; the compile time is ``load_s`` (measured on a
    first inference of the stored sample), apart from inference.

    Variants (the runner spec's ``provider``): none, Inductor's default mode; ``cudagraphs``,
    its reduce-overhead mode (each shape's kernels replayed as one CUDA graph); ``max_autotune``
    (kernels autotuned, then CUDA graphs: minutes to compile). On CUDA the weights are frozen
    (Inductor's ``freezing``: weights become constants, batch norms fold into convolutions),
    which holds for inference only, the one use here."""

    name = "torch_compile"
    MODES = {None: None, "cpu": None, "cuda": None, "cudagraphs": "reduce-overhead", "max_autotune": "max-autotune"}

    @classmethod
    def tuning_candidates(cls, device: str, provider: str | None, cpus: int) -> list[dict]:
        return []   # each candidate would compile the module again (and once more to verify it)

    def compile_options(self) -> dict | None:
        """Inductor's options for this variant (torch.compile takes a mode or options, not both)."""
        import torch._inductor

        if self.provider not in self.MODES:
            raise RunnerUnavailable(f"torch_compile has no variant {self.provider!r}; "
                                    f"known: {', '.join(k for k in self.MODES if k)}")
        mode = self.MODES[self.provider]
        options = dict(torch._inductor.list_mode_options(mode)) if mode else {}
        if self.device == "cuda":
            options["freezing"] = True
        return options or None

    def load(self):
        from navigator.workspace import npz
        from navigator.workspace.layout import Workspace

        options = self.compile_options()
        if options and options.get("triton.cudagraphs"):
            # a graph's outputs are overwritten by its next replay: each call starts a new step
            self._step_begin = self._torch.compiler.cudagraph_mark_step_begin
        compiled = self._torch.compile(self.module(), options=options)
        sample = npz.load(Workspace(Path(self.path).parent.parent.parent).input_files()[0])
        self.fn = compiled
        before = self._graph_cache()
        self.infer_impl({n: sample[n] for n in self.input_names})   # compiles
        after = self._graph_cache()
        # compiled here or read back from the run's compiler cache (navigator.execution.compile_cache)
        self.graph_cache = {k: after[k] - before[k] for k in after}
        logging.getLogger("navigator.worker").info("torch_compile: inductor graph cache %d hit, %d miss",
                                                   self.graph_cache["hit"], self.graph_cache["miss"])
        return compiled

    @staticmethod
    def _graph_cache() -> dict:
        from torch._dynamo.utils import counters

        return {"hit": counters["inductor"]["fxgraph_cache_hit"], "miss": counters["inductor"]["fxgraph_cache_miss"]}


class TorchScriptRunner(_TorchRunner):
    name = "torchscript"

    def load(self):
        module = self._torch.jit.load(str(self.path), map_location=self.device)
        return module.eval()


class TorchExportRunner(_TorchRunner):
    name = "torch_export"

    def load(self):
        return self._layout(on_device(self._torch.export.load(str(self.path)), self.device).module())


def on_device(program, device: str):
    """An ExportedProgram moved to ``device``, the devices burnt into its nodes too (a ``.to()`` in
    forward leaves an assertion of the export's device: BERT's mask, "Tensor device mismatch")."""
    from torch.export.passes import move_to_device_pass

    return move_to_device_pass(program, device) if device != "cpu" else program


def promote_libstdcxx() -> None:
    """Put the system libstdc++ in the global symbol scope before a package's model library is
    loaded, so its C++ runtime symbols (locale facet ids among them) bind to libstdc++ itself,
    not to copies that another library loaded earlier exports. A package loaded in a fresh
    process on CUDA segfaulted in std::regex's locale lookup (benchmarks/results/gpu_*.md)."""
    import ctypes
    import ctypes.util
    import os

    name = ctypes.util.find_library("stdc++") or "libstdc++.so.6"
    try:
        ctypes.CDLL(name, mode=os.RTLD_GLOBAL)
    except OSError:   # no separate libstdc++: nothing to promote
        pass


class AotiRunner(_TorchRunner):
    """An AOTInductor package runs on the device it was compiled for."""

    name = "aoti"

    def load(self):
        import torch._inductor

        compiled_for = self.options.get("compiled_for")
        if compiled_for and compiled_for != self.device:
            raise RunnerUnavailable(f"this AOTInductor package was compiled for {compiled_for}, not {self.device}")
        if self.device == "cuda":
            # A fresh process has no CUDA context yet; load into an initialised device.
            torch.cuda.init()
            torch.empty(1, device="cuda")
            promote_libstdcxx()
            return torch._inductor.aoti_load_package(str(self.path), device_index=torch.cuda.current_device())
        return torch._inductor.aoti_load_package(str(self.path))
