"""Runners: how a format is executed. Each loads an artifact on a device and
maps ``{name: ndarray}`` feeds to ``{name: ndarray}`` outputs.

Which runners a format has, and which class implements each runner, come from
the format records (:mod:`navigator.formats`); classes are named there as
``module:Class`` strings and imported only when used, so ``import
navigator.runners`` pulls in no framework.
"""

from __future__ import annotations

from navigator.errors import UserInputError
from navigator.formats import RunnerSpec
from navigator.formats.registry import registry

__all__ = ["RunnerSpec", "known_runners", "selected", "specs_for", "runner_class", "verify_options", "create"]


def known_runners() -> list[str]:
    return sorted(registry.runner_classes())


def selected(spec: RunnerSpec, chosen) -> bool:
    """``spec`` runs under ``--runners chosen`` (None: every runner that is not opt-in).
    A runner name selects its every variant but the opt-in ones; a runner key selects that one."""
    if spec.opt_in:
        return bool(chosen) and spec.key in chosen
    return not chosen or spec.runner in chosen or spec.key in chosen


def specs_for(fmt: str, device: str) -> tuple[RunnerSpec, ...]:
    """The runners of format ``fmt`` on ``device`` (none for an unknown format)."""
    return registry.get(fmt).runners_on(device) if registry.has(fmt) else ()


def runner_class(name: str):
    classes = registry.runner_classes()
    if name not in classes:
        raise UserInputError(f"unknown runner {name!r}; known: {', '.join(sorted(classes))}")
    from navigator.dotted import resolve

    return resolve(classes[name])


def verify_options(fmt: str, precision: str, device: str) -> dict:
    """The options a format's runners verify it with: the same ones serve it (``Result.runner``)."""
    options = {"precision": precision}
    if registry.has(fmt) and registry.get(fmt).compiled_for_device:
        options["compiled_for"] = device
    return options


def create(spec: RunnerSpec, path, **options):
    """An (inactive) runner for the artifact at ``path``."""
    return runner_class(spec.runner)(path, device=spec.device, provider=spec.provider, **options)
