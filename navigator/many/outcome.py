"""What convert-many hands back: one :class:`ModelOutcome` per manifest entry and a
:class:`ManyResult` over them, with the run's exit code."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from navigator.many.manifest import Manifest, ModelEntry

# Severity of a model's exit code when the run's code is chosen: the worst model decides.
_SEVERITY = {0: 0, 1: 1, 2: 2, 3: 3, 130: 4}


@dataclass
class ModelOutcome:
    entry: ModelEntry
    exit_code: int | None = None          # navigator convert's exit code for this model; None: never ran
    message: str | None = None            # the error line, when the model stopped with one
    failures: list[str] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)    # phases that ended (build, measure, full)
    attempts: int = 0                     # tasks started for it, retries included
    lost: int = 0                         # attempts lost with their node (and retried while retries lasted)
    nodes: list[str] = field(default_factory=list)     # short ids of the nodes its attempts ran on
    interrupted: bool = False

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def workspace(self) -> Path:
        from navigator.workspace.layout import SUFFIX

        return Path(self.entry.config.workdir or ".") / f"{self.entry.name}{SUFFIX}"

    @property
    def result(self) -> str:
        """ok | failed | error | interrupted | not run"""
        if self.interrupted:
            return "interrupted"
        if self.exit_code is None:
            return "not run"
        if self.exit_code == 0:
            return "ok"
        if self.exit_code == 1:
            return "ok (failures allowed)" if self.entry.config.allow_failures else "failed"
        return "error"

    @property
    def effective_code(self) -> int:
        if self.interrupted:
            return 130
        if self.exit_code is None:
            return 0
        if self.exit_code == 1 and self.entry.config.allow_failures:
            return 0
        return self.exit_code


@dataclass
class ManyResult:
    manifest: Manifest
    models: list[ModelOutcome]
    summary_path: Path | None = None
    parallel: bool = True                 # False: no Ray, the models ran one at a time
    wall_s: float = 0.0
    interrupted: bool = False             # Ctrl-C stopped the run

    @property
    def workdir(self) -> Path:
        return self.manifest.workdir

    @property
    def exit_code(self) -> int:
        """The worst model's: 130 interrupted > 3 internal error > 2 bad input > 1 failed > 0."""
        if self.interrupted:
            return 130
        codes = [m.effective_code for m in self.models]
        return max(codes, key=lambda c: _SEVERITY.get(c, 3), default=0)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def result(self, name: str):
        """The :class:`navigator.api.Result` of one model's workspace (``navigator.load``)."""
        from navigator.api import load

        for m in self.models:
            if m.name == name:
                return load(m.workspace)
        raise KeyError(name)
