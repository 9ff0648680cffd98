"""Unit tests for navigator.converters.registry: registration, plugins, lazy imports."""

from __future__ import annotations

import importlib
import logging
import subprocess
import sys
import textwrap

import pytest

from navigator.converters.base import Converter
from navigator.converters.registry import ConverterRegistry, DuplicateConverter, registry
from navigator.errors import UserInputError


def fresh() -> ConverterRegistry:
    return ConverterRegistry(builtins=(), entry_point_group=None)


def edge(name, source, target):
    return type(name.title().replace("_", ""), (Converter,), {"name": name, "source": source, "target": target,
                                                              "__module__": __name__})


def test_register_and_get():
    r = fresh()
    A = r.register(edge("a_to_b", "a", "b"))
    assert r.get("a_to_b") is A
    assert r.names() == ["a_to_b"]
    assert r.edges() == [A]
    assert r.targets() == ["b"]


def test_register_decorator_forms():
    r = fresh()

    @r.register
    class One(Converter):
        name, source, target = "one", "a", "b"

    @r.register(origin="builtin")
    class Two(Converter):
        name, source, target = "two", "a", "c"

    assert r.names() == ["one", "two"]
    assert r._origin == {"one": "user", "two": "builtin"}


def test_duplicate_name_is_an_error():
    r = fresh()
    r.register(edge("a_to_b", "a", "b"))
    with pytest.raises(DuplicateConverter) as e:
        r.register(edge("a_to_b", "a", "c"))
    assert str(e.value) == f"a converter named 'a_to_b' is already registered ({__name__})"
    # registering the very same class twice is harmless
    A = r.get("a_to_b")
    assert r.register(A) is A


def test_converter_needs_name_source_target():
    with pytest.raises(ValueError) as e:
        fresh().register(type("NoName", (Converter,), {"source": "a", "target": "b"}))
    assert str(e.value) == "NoName: a converter needs name, source and target"


def test_unknown_name_lists_valid_names():
    r = fresh()
    r.register(edge("x_to_y", "x", "y"))
    r.register(edge("a_to_b", "a", "b"))
    with pytest.raises(UserInputError) as e:
        r.get("nope")
    assert str(e.value) == "unknown converter 'nope'; valid: a_to_b, x_to_y"


def test_user_converter_wins_over_builtin_for_same_edge():
    r = fresh()
    User = r.register(edge("my_onnx_to_openvino", "onnx", "openvino"))
    Builtin = r.register(edge("onnx_to_openvino", "onnx", "openvino"), origin="builtin")
    assert r.edges() == [User]
    r.unregister("my_onnx_to_openvino")
    assert r.edges() == [Builtin]
    Plugin = r.register(edge("plugin_ov", "onnx", "openvino"), origin="plugin")
    assert r.edges() == [Plugin]


def test_default_registry_has_the_builtins():
    assert {"onnx_to_onnx_optimized", "onnx_to_openvino"} <= set(registry.names())
    ov = registry.get("onnx_to_openvino")
    assert (ov.source, ov.target, ov.requires, ov.devices) == ("onnx", "openvino", ("openvino",), ("cpu",))
    opt = registry.get("onnx_to_onnx_optimized")
    assert (opt.source, opt.target) == ("onnx", "onnx-optimized")
    assert registry._origin["onnx_to_openvino"] == "builtin"


def test_second_registry_with_builtins_gets_them_too():
    r = ConverterRegistry(entry_point_group=None)
    from navigator.converters.registry import builtin_modules

    assert r.names() == sorted(r.get(n).name for n in r.names())
    assert {"onnx_to_onnx_optimized", "onnx_to_openvino"} <= set(r.names())
    modules = builtin_modules()
    assert len(r.names()) >= len(modules) >= 14
    assert "torch_precision" in modules and "base" not in modules and "onnx_check" not in modules
    assert set(r._origin.values()) == {"builtin"}


def test_registry_import_is_lazy():
    code = textwrap.dedent("""
        import sys
        import navigator.converters.registry as r
        heavy = [m for m in ("onnx", "onnxruntime", "openvino", "polygraphy", "torch") if m in sys.modules]
        print(heavy)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# --- entry-point plugins ----------------------------------------------------------

@pytest.fixture
def plugin_site(tmp_path, monkeypatch):
    """A dist-info folder on sys.path declaring navigator.converters entry points."""
    site = tmp_path / "site"
    dist = site / "navtestplug-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: navtestplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent("""
        [navigator.converters]
        navtest_broken = navtestplug_broken
        navtest_good = navtestplug_good:GoodConverter
        navtest_module = navtestplug_module
        navtest_notconv = navtestplug_good:helper
        navtest_dup = navtestplug_dup:Dup
    """))
    (site / "navtestplug_broken.py").write_text("raise ImportError('needs libfoo, which is not installed')\n")
    (site / "navtestplug_good.py").write_text(textwrap.dedent("""
        from navigator.converters.base import Converter

        class GoodConverter(Converter):
            name = "navtest_good"
            source = "onnx"
            target = "onnx-navtest"

        def helper():
            pass
    """))
    (site / "navtestplug_module.py").write_text(textwrap.dedent("""
        from navigator.converters.base import Converter

        class _Base(Converter):
            source = "onnx"

        class ModConverter(_Base):
            name = "navtest_mod"
            target = "onnx-navmod"
    """))
    (site / "navtestplug_dup.py").write_text(textwrap.dedent("""
        from navigator.converters.base import Converter

        class Dup(Converter):
            name = "onnx_to_openvino"
            source = "onnx"
            target = "openvino"
    """))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield site
    for mod in [m for m in sys.modules if m.startswith("navtestplug_")]:
        del sys.modules[mod]


def test_entry_point_plugins(plugin_site, caplog):
    r = ConverterRegistry(builtins=(), entry_point_group="navigator.converters")
    with caplog.at_level(logging.WARNING, logger="navigator.converters.registry"):
        names = r.names()
    assert {"navtest_good", "navtest_mod"} <= set(names)
    assert r._origin["navtest_good"] == "plugin"
    assert r.get("navtest_good").__module__ == "navtestplug_good"
    assert r.unavailable["navtest_broken"] == "ImportError: needs libfoo, which is not installed"
    assert r.unavailable["navtest_notconv"] == "TypeError: navtestplug_good:helper is not a Converter subclass"
    assert "navtest_dup" not in r.unavailable        # no built-ins here: no clash
    assert "converter plugin navtest_broken is unavailable: ImportError: needs libfoo" in caplog.text
    # the registry still works, and an unknown name mentions the broken plugin
    assert "onnx-navtest" in r.targets()
    with pytest.raises(UserInputError) as e:
        r.get("nope")
    assert "unavailable plugins: " in str(e.value) and "navtest_broken" in str(e.value)


def test_plugin_name_clashing_with_builtin_is_unavailable(plugin_site):
    r = ConverterRegistry(entry_point_group="navigator.converters")
    r.names()
    assert r.unavailable["navtest_dup"].startswith(
        "DuplicateConverter: a converter named 'onnx_to_openvino' is already registered")
    assert r.get("onnx_to_openvino").__module__ == "navigator.converters.onnx_to_openvino"
