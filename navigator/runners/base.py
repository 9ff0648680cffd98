"""The runner lifecycle (a template method): ``activate`` / ``infer`` /
``deactivate`` check state and feed names; subclasses write the ``*_impl``."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import ClassVar

from navigator.errors import UserInputError


class RunnerError(Exception):
    """A runner could not load or run the artifact."""


class RunnerUnavailable(RunnerError):
    """The runner cannot run here (a missing package, provider or device): ``skipped``."""


class Runner:
    name: ClassVar[str] = "base"
    requires: ClassVar[tuple[str, ...]] = ()
    # unmeasured running before each race or tuning window, after other runners ran: until their
    # idle threads stop spinning (torch's ~10 ms; benchmarks/results/speed_cpu.md, "Race settings")
    rewarm_s: ClassVar[float] = 0.02

    def __init__(self, path: str | os.PathLike, *, device: str = "cpu", provider: str | None = None, **options):
        self.path = Path(path)
        self.device = device
        self.provider = provider
        self.options = options
        self.is_active = False
        self.input_names: list[str] = []
        self.output_names: list[str] = []
        self.last_inference_s: float | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, device={self.device!r}, provider={self.provider!r})"

    # -- public lifecycle -------------------------------------------------
    def activate(self) -> "Runner":
        if self.is_active:
            raise RunnerError(f"{self!r} is already active")
        from navigator import deps

        missing = deps.missing(self.requires)
        if missing:
            raise RunnerUnavailable(f"runner {self.name} needs {', '.join(missing)}, which is not installed")
        self.activate_impl()
        self.is_active = True
        return self

    def infer(self, feeds: dict) -> dict:
        if not self.is_active:
            raise RunnerError(f"{self!r} is not active; call activate() first")
        names = set(feeds)
        expected = set(self.input_names)
        if names != expected:
            missing, extra = sorted(expected - names), sorted(names - expected)
            raise UserInputError(f"feeds do not match the model's inputs (missing {missing}, unknown {extra})")
        start = time.perf_counter()
        outputs = self.infer_impl(feeds)
        self.last_inference_s = time.perf_counter() - start
        return outputs

    def deactivate(self) -> None:
        if self.is_active:
            self.deactivate_impl()
            self.is_active = False

    def __enter__(self) -> "Runner":
        return self if self.is_active else self.activate()

    def __exit__(self, *exc) -> None:
        self.deactivate()

    __call__ = infer

    @classmethod
    def effective_precision(cls, provider: str | None, precision: str) -> str:
        """The precision a runner of this class computes a ``precision`` artifact in (another one
        when its runtime changes it, e.g. OpenVINO's default on a bf16 CPU): its verdict is judged
        by that precision's rules."""
        return precision

    def settings(self) -> dict:
        """The runtime settings this runner's numbers depend on, as the runtime reports them once
        active (recorded with each verdict: what is verified is what must be served)."""
        return {}

    @classmethod
    def tuning_candidates(cls, device: str, provider: str | None, cpus: int) -> list[dict]:
        """Runtime options worth measuring against this runner's defaults on ``cpus`` cores (thread
        counts, execution modes, performance hints): each a dict of options this class accepts. Only
        options that leave the arithmetic alone; the race still verifies the one it keeps
        (:mod:`navigator.execution.tuning`)."""
        return []

    def profiling_infer(self):
        """``(infer, io)``: what the profiler times. ``io`` is ``"host"`` when each call
        takes host arrays and returns host arrays (the default), ``"device"`` when the
        inputs stay on the accelerator and outputs are not copied back."""
        return self.infer, "host"

    # -- subclass hooks ---------------------------------------------------
    def activate_impl(self) -> None:
        raise NotImplementedError

    def infer_impl(self, feeds: dict) -> dict:
        raise NotImplementedError

    def deactivate_impl(self) -> None:
        pass
