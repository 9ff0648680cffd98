"""The format registry: the built-in :class:`Format` records plus plugins from the
entry-point group ``navigator.formats``, loaded lazily on first use (never for
``navigator --help``).

An entry point names a ``Format``, a list or tuple of them, or a module whose
``FORMATS`` holds them. A duplicate name is an error unless it is the same
record; a plugin that fails to load is listed as unavailable with its reason
(the converter registry does the same for edges).
"""

from __future__ import annotations

import logging

from navigator.errors import UserInputError
from navigator.formats.descriptor import Format

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "navigator.formats"


class DuplicateFormat(ValueError):
    pass


class FormatRegistry:
    def __init__(self, entry_point_group: str | None = ENTRY_POINT_GROUP):
        self._group = entry_point_group
        self._formats: dict[str, Format] = {}
        self.unavailable: dict[str, str] = {}
        self._builtins_loaded = False
        self._plugins_loaded = False

    def register(self, fmt: Format) -> Format:
        if not isinstance(fmt, Format):
            raise TypeError(f"expected a navigator.formats.Format, got {type(fmt).__name__}")
        self._load_builtins()
        old = self._formats.get(fmt.name)
        if old is not None and old != fmt:
            raise DuplicateFormat(f"a format named {fmt.name!r} is already registered")
        for runner, path in fmt.runner_classes.items():
            known = self._runner_classes().get(runner)
            if known is not None and known != path:
                raise DuplicateFormat(f"format {fmt.name!r}: runner {runner!r} is already {known}, not {path}")
        self._formats[fmt.name] = fmt
        return fmt

    def unregister(self, name: str) -> None:
        self._formats.pop(name, None)

    def _load_builtins(self) -> None:
        if self._builtins_loaded:
            return
        self._builtins_loaded = True
        from navigator.formats.builtin import FORMATS

        for fmt in FORMATS:
            self._formats[fmt.name] = fmt

    def _load(self) -> None:
        self._load_builtins()
        if self._plugins_loaded or not self._group:
            return
        self._plugins_loaded = True
        import types
        from importlib.metadata import entry_points

        for ep in entry_points(group=self._group):
            try:
                obj = ep.load()
                if isinstance(obj, types.ModuleType):
                    obj = getattr(obj, "FORMATS", None)
                found = [obj] if isinstance(obj, Format) else list(obj) if isinstance(obj, (list, tuple)) else []
                if not found or not all(isinstance(f, Format) for f in found):
                    raise TypeError(f"{ep.value} is not a Format, a list of them, or a module with FORMATS")
                for fmt in found:
                    self.register(fmt)
            except Exception as e:  # a broken plugin must not break the tool
                self.unavailable[ep.name] = f"{type(e).__name__}: {e}"
                log.warning("format plugin %s is unavailable: %s: %s", ep.name, type(e).__name__, e)

    def has(self, name: str) -> bool:
        self._load_builtins()
        if name in self._formats:
            return True
        self._load()
        return name in self._formats

    def get(self, name: str) -> Format:
        if not self.has(name):
            raise UserInputError(f"unknown format {name!r}; formats: {', '.join(self.names())}")
        return self._formats[name]

    def names(self) -> list[str]:
        self._load()
        return list(self._formats)

    def all(self) -> list[Format]:
        self._load()
        return list(self._formats.values())

    def _runner_classes(self) -> dict[str, str]:
        table: dict[str, str] = {}
        for fmt in self._formats.values():
            table.update(fmt.runner_classes)
        return table

    def runner_classes(self) -> dict[str, str]:
        """Runner name -> ``module:Class``, over every format."""
        self._load()
        return self._runner_classes()

    def serving_check(self, fmt: str, runner_key: str) -> bool:
        """Whether runner ``runner_key`` of format ``fmt`` checks how a server runs it (RunnerSpec)."""
        self._load()
        record = self._formats.get(fmt)
        return record is not None and any(spec.serving_check for specs in record.runners.values() for spec in specs
                                    if spec.key == runner_key)

    def runner_keys(self) -> set[str]:
        """Every runner key (``torch_compile-cudagraphs`` …) of every format on every device."""
        self._load()
        return {spec.key for fmt in self._formats.values() for specs in fmt.runners.values() for spec in specs}


registry = FormatRegistry()
