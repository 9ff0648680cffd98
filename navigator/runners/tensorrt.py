"""TensorRT and TensorRT-RTX engines (model.plan) through Polygraphy's TrtRunner.

Both need an NVIDIA GPU; everywhere else ``activate`` raises RunnerUnavailable
with the reason (the step is ``skipped``). With several optimization profiles
the runner picks, for each feed, the first profile whose min..max range holds
the feed's shapes. Plugin libraries recorded in engine.yaml are loaded first.
"""

from __future__ import annotations

import sys
from typing import ClassVar

from navigator.runners.base import Runner, RunnerError, RunnerUnavailable


class TensorRTRunner(Runner):
    name = "tensorrt"
    module: ClassVar[str] = "tensorrt"
    flavour: ClassVar[str] = "TensorRT"

    def _check_here(self) -> None:
        from navigator import deps

        if self.device != "cuda":
            raise RunnerUnavailable(f"{self.flavour} engines run only on an NVIDIA GPU; this run verifies on "
                                    f"{self.device} (no GPU visible, or --device {self.device})")
        if not deps.has(self.module):
            raise RunnerUnavailable(f"{self.flavour} is not installed (Python module {self.module}); install it to "
                                    "run the engine")
        if not deps.gpu_present():
            raise RunnerUnavailable(f"{self.flavour} engines need an NVIDIA GPU and none is visible")

    def activate_impl(self) -> None:
        self._check_here()
        import importlib

        from navigator.tools import engine as engine_mod

        header = engine_mod.read_header(self.path)
        trt = importlib.import_module(self.module)
        if header.builder != self.module:
            raise RunnerError(f"{self.path.name} was built by {header.display}; the {self.name} runner cannot "
                              "load it")
        installed = tuple(int(x) for x in str(trt.__version__).split(".")[:3])
        if installed != header.version[:3] and not self._version_compatible():
            raise RunnerError(f"{self.path.name} was built by {header.display} but {self.flavour} "
                              f"{trt.__version__} is installed: an engine loads only with the version that built it")
        self._load_plugins(trt)
        trt_runner_module = "polygraphy.backend.trt"
        from polygraphy import config as pg_config

        want_rtx = self.module == "tensorrt_rtx"
        if trt_runner_module in sys.modules and bool(pg_config.USE_TENSORRT_RTX) != want_rtx:
            raise RunnerError("Polygraphy's TensorRT backend is already loaded for the other TensorRT flavour in "
                              "this process")
        pg_config.USE_TENSORRT_RTX = want_rtx
        from polygraphy.backend.trt import EngineFromBytes, TrtRunner

        self._runner = TrtRunner(EngineFromBytes(self.path.read_bytes()))
        self._runner.activate()
        engine = self._runner.engine
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.input_names = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.output_names = [n for n in names if n not in self.input_names]
        self._ranges = []
        for p in range(engine.num_optimization_profiles):
            ranges = {}
            for n in self.input_names:
                lo, _, hi = engine.get_tensor_profile_shape(n, p)
                ranges[n] = (tuple(lo), tuple(hi))
            self._ranges.append(ranges)
        self._profile = 0

    def _version_compatible(self) -> bool:
        info = self._engine_yaml()
        return bool(info.get("version_compatible"))

    def _engine_yaml(self) -> dict:
        import yaml

        p = self.path.parent / "engine.yaml"
        try:
            return yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            return {}

    def _load_plugins(self, trt) -> None:
        plugins = self._engine_yaml().get("plugins") or []
        if plugins:
            import logging

            from navigator.converters.tensorrt_builder import load_plugins

            load_plugins(trt, trt.Logger(trt.Logger.WARNING), plugins)
            logging.getLogger(__name__).info("loaded plugin libraries %s", plugins)

    def profile_for(self, feeds: dict) -> int:
        """The first optimization profile whose min..max range holds every feed's shape."""
        for i, ranges in enumerate(self._ranges):
            if all(len(feeds[n].shape) == len(ranges[n][0])
                   and all(lo <= d <= hi for lo, d, hi in zip(ranges[n][0], feeds[n].shape, ranges[n][1]))
                   for n in ranges if n in feeds):
                return i
        shapes = {n: list(v.shape) for n, v in feeds.items()}
        raise RunnerError(f"no optimization profile of the engine holds the input shapes {shapes}")

    def infer_impl(self, feeds: dict) -> dict:
        import numpy as np

        if len(self._ranges) > 1:
            index = self.profile_for(feeds)
            if index != self._profile:
                self._runner.set_profile(index)
                self._profile = index
        outputs = self._runner.infer(feeds, copy_outputs_to_host=True)
        return {n: np.array(outputs[n], copy=True) for n in self.output_names}

    def deactivate_impl(self) -> None:
        runner = getattr(self, "_runner", None)
        if runner is not None:
            runner.deactivate()
            del self._runner


class TensorRTRTXRunner(TensorRTRunner):
    """TensorRT-RTX engines: built anywhere (even on a CPU), run on NVIDIA RTX-class GPUs
    (Turing and newer; the plan holds kernels for the compute capabilities it was built for)."""

    name = "tensorrt_rtx"
    module = "tensorrt_rtx"
    flavour = "TensorRT-RTX"
