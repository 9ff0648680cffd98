"""The converter registry: built-in edges plus plugins from the entry-point
group ``navigator.converters``, both loaded lazily on first use. A built-in edge is
any module of this package with a ``@register`` class: found by reading the sources
(``ast``: it imports ``register`` from here), imported only then, so adding one is adding its file.

A duplicate name is an error; an unknown name lists the valid ones; a plugin
that fails to load is listed as unavailable with its reason; a plugin edge
with the same (source, target) as a built-in one wins.
"""

from __future__ import annotations

import ast
import importlib
import logging
from pathlib import Path

from navigator.errors import UserInputError

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "navigator.converters"


def builtin_modules() -> tuple[str, ...]:
    """The modules of this package that register converters (they import ``register`` from here),
    by name, sorted; read as text, nothing imported."""
    found = []
    for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError):
            continue
        if any(isinstance(node, ast.ImportFrom) and node.module == "navigator.converters.registry"
               and any(alias.name == "register" for alias in node.names) for node in tree.body):
            found.append(path.stem)
    if not found:   # installed without sources (.pyc only): every module of the package, imported
        import pkgutil

        found = [m.name for m in pkgutil.iter_modules([str(Path(__file__).resolve().parent)])]
    return tuple(found)


class DuplicateConverter(ValueError):
    pass


class ConverterRegistry:
    def __init__(self, builtins: tuple[str, ...] | None = None, entry_point_group: str | None = ENTRY_POINT_GROUP):
        self._builtins = builtins       # None: builtin_modules(), found when first needed
        self._group = entry_point_group
        self._converters: dict[str, type] = {}
        self._origin: dict[str, str] = {}  # name -> "builtin" | "plugin" | "user"
        self.unavailable: dict[str, str] = {}
        self._loaded = False
        self._loading = ""

    def register(self, cls=None, *, origin: str | None = None):
        """Class decorator: ``@registry.register``. Plugins and user code registered
        after the built-ins win for the same (source, target)."""

        def decorate(c):
            if not getattr(c, "name", "") or not c.source or not c.target:
                raise ValueError(f"{c.__qualname__}: a converter needs name, source and target")
            if c.name in self._converters and self._converters[c.name] is not c:
                raise DuplicateConverter(f"a converter named {c.name!r} is already registered "
                                         f"({self._converters[c.name].__module__})")
            self._converters[c.name] = c
            self._origin[c.name] = origin or self._loading or "user"
            return c

        return decorate(cls) if cls is not None else decorate

    def unregister(self, name: str) -> None:
        self._converters.pop(name, None)
        self._origin.pop(name, None)

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for module in self._builtins if self._builtins is not None else builtin_modules():
            self._loading = "builtin"
            try:
                mod = importlib.import_module(f"navigator.converters.{module}")
            finally:
                self._loading = ""
            # The module's @register went to the default registry, and only on its first
            # import: register its classes here too, as built-ins.
            for cls in _converters_in(mod):
                self.register(cls, origin="builtin")
        if self._group:
            self._load_plugins()

    def _load_plugins(self) -> None:
        import types
        from importlib.metadata import entry_points

        from navigator.converters.base import Converter

        for ep in entry_points(group=self._group):
            self._loading = "plugin"
            try:
                obj = ep.load()
                if isinstance(obj, types.ModuleType):
                    found = _converters_in(obj)
                    if not found:
                        raise TypeError(f"module {obj.__name__} defines no Converter subclass")
                elif isinstance(obj, type) and issubclass(obj, Converter):
                    found = [obj]
                else:
                    raise TypeError(f"{ep.value} is not a Converter subclass")
                for cls in found:
                    if self._converters.get(cls.name) is cls:   # its own @register did it
                        self._origin[cls.name] = "plugin"
                    else:
                        self.register(cls, origin="plugin")
            except Exception as e:  # a broken plugin must not break the tool
                self.unavailable[ep.name] = f"{type(e).__name__}: {e}"
                log.warning("converter plugin %s is unavailable: %s: %s", ep.name, type(e).__name__, e)
            finally:
                self._loading = ""

    def names(self) -> list[str]:
        self._load()
        return sorted(self._converters)

    def get(self, name: str):
        self._load()
        if name not in self._converters:
            extra = f"; unavailable plugins: {', '.join(self.unavailable)}" if self.unavailable else ""
            raise UserInputError(f"unknown converter {name!r}; valid: {', '.join(sorted(self._converters))}{extra}")
        return self._converters[name]

    def edges(self) -> list[type]:
        """One converter per (source, target): user and plugin ones win over built-ins."""
        self._load()
        rank = {"builtin": 0, "plugin": 1, "user": 2}
        chosen: dict[tuple[str, str], type] = {}
        for name, cls in self._converters.items():
            key = (cls.source, cls.target)
            if key not in chosen or rank[self._origin[name]] >= rank[self._origin[chosen[key].name]]:
                chosen[key] = cls
        return list(chosen.values())

    def targets(self) -> list[str]:
        return sorted({c.target for c in self.edges()})


def _converters_in(module) -> list[type]:
    """The Converter subclasses a module defines (not the ones it imports, nor abstract
    bases that only inherit a name)."""
    from navigator.converters.base import Converter

    return [obj for obj in vars(module).values()
            if isinstance(obj, type) and issubclass(obj, Converter) and obj.__module__ == module.__name__
            and obj.__dict__.get("name") and obj.source and obj.target]


registry = ConverterRegistry()
register = registry.register
