"""Plugin converters that segfault, hang, raise or compute the wrong numbers:
each ends `failed` with its reason while the other formats finish."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

import navigator
from navigator.converters.registry import registry

from . import plugin_converters as plugins

pytestmark = pytest.mark.functional
HERE = Path(__file__).resolve().parent


@pytest.fixture
def registered():
    classes = [plugins.Segfault, plugins.Hang, plugins.Raises, plugins.WrongNumbers, plugins.Copy,
               plugins.NeedsMissingPackage]
    for cls in classes:
        registry.register(cls)
    yield
    for cls in classes:
        registry.unregister(cls.name)


def test_faulty_converters_fail_alone(registered, tmp_path, onnx_model):
    start = time.monotonic()
    result = navigator.convert(onnx_model("foldable_mlp"), workdir=tmp_path / "wd", timeout=8, no_profile=True,
                               targets=["onnx", "onnx-crash", "onnx-hang", "onnx-raise", "onnx-wrong",
                                        "onnx-optimized", "onnx-copy"])
    elapsed = time.monotonic() - start
    formats = result.status.formats
    assert result.exit_code == 1 and not result.ok
    crash = formats["onnx-crash"].convert
    assert crash.status == "failed" and "SIGSEGV" in crash.reason, crash
    hang = formats["onnx-hang"].convert
    assert hang.status == "failed" and "timed out after 8 s in convert" in hang.reason, hang
    raised = formats["onnx-raise"].convert
    assert raised.status == "failed" and "RuntimeError: planted converter failure" in raised.reason
    wrong = formats["onnx-wrong"]
    assert wrong.convert.status == "ok"
    assert wrong.runners["onnxruntime-cpu"].verify.status == "failed"
    assert "exceed atol" in wrong.runners["onnxruntime-cpu"].verify.reason
    for key in ("onnx", "onnx-optimized", "onnx-copy"):
        assert formats[key].verified, (key, formats[key])
    assert result.best is not None and result.best.key in ("onnx", "onnx-optimized", "onnx-copy")
    assert len(result.failures) == 4
    assert elapsed < 90
    # status.yaml on disk says the same
    st = yaml.safe_load((result.workspace / "status.yaml").read_text())
    assert st["state"] == "complete"
    assert st["formats"]["onnx-crash"]["convert"]["status"] == "failed"
    # the crash's log tail is kept
    assert (result.workspace / "formats" / "onnx-crash" / "worker.log").is_file()


def _entry_point_dist(tmp_path, body: str) -> Path:
    site = tmp_path / "site"
    dist = site / "navplugins-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: navplugins\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent(body))
    (site / "navplugins_mod.py").write_text((HERE / "plugin_converters.py").read_text())
    return site


def test_entry_point_plugins_through_the_cli(cli, tmp_path, onnx_model):
    """Plugins found through the `navigator.converters` entry-point group, in a
    fresh CLI process; one that fails to import is reported, the rest work."""
    site = _entry_point_dist(tmp_path, """
        [navigator.converters]
        copy = navplugins_mod:Copy
        wrong = navplugins_mod:WrongNumbers
        broken = navplugins_missing_mod:Nothing
    """)
    r = cli("convert", onnx_model("foldable_mlp"), "--workdir", tmp_path / "wd", "--no-profile",
            "--targets", "onnx,onnx-copy,onnx-wrong", env={"PYTHONPATH": str(site)})
    assert r.returncode == 1, r.stdout + r.stderr
    st = yaml.safe_load((tmp_path / "wd" / "foldable_mlp.nav.workspace" / "status.yaml").read_text())
    assert st["formats"]["onnx-copy"]["runners"]["onnxruntime-cpu"]["verify"]["status"] == "ok"
    assert st["formats"]["onnx-wrong"]["runners"]["onnxruntime-cpu"]["verify"]["status"] == "failed"
    log = (tmp_path / "wd" / "foldable_mlp.nav.workspace" / "navigator.log").read_text()
    assert "converter plugin broken is unavailable: ModuleNotFoundError" in log
    r = cli("convert", onnx_model("foldable_mlp"), "--workdir", tmp_path / "wd", "--no-profile",
            "--targets", "onnx,onnx-copy,onnx-wrong", "--allow-failures", env={"PYTHONPATH": str(site)})
    assert r.returncode == 0


def test_help_does_not_load_plugins(cli, tmp_path):
    site = _entry_point_dist(tmp_path, """
        [navigator.converters]
        boom = navplugins_boom:X
    """)
    (site / "navplugins_boom.py").write_text("raise SystemExit('plugin imported during --help')\n")
    r = cli("--help", env={"PYTHONPATH": str(site)})
    assert r.returncode == 0 and "convert" in r.stdout
    r = cli("convert", "--help", env={"PYTHONPATH": str(site)})
    assert r.returncode == 0 and "--max-shapes" in r.stdout


def test_missing_package_is_skipped_with_reproduce_script(registered, tmp_path, onnx_model):
    result = navigator.convert(onnx_model("foldable_mlp"), workdir=tmp_path, no_profile=True,
                               targets=["onnx", "onnx-missing"])
    fs = result.status.formats["onnx-missing"]
    assert result.exit_code == 0, result.failures
    assert fs.convert.status == "skipped" and "navigator_no_such_package" in fs.convert.reason
    assert all(r.verify.status == "skipped" for r in fs.runners.values())
    script = (result.workspace / "formats" / "onnx-missing" / "reproduce.sh").read_text()
    assert "python -P -m tests.functional.plugin_converters --workspace . --source formats/onnx/model.onnx" in script


def test_reference_from_another_format(registered, tmp_path, onnx_model):
    """--reference KEY: the reference outputs come from that format's runner, and every
    other format (the source included) is verified against them."""
    result = navigator.convert(onnx_model("foldable_mlp"), workdir=tmp_path, no_profile=True, device="cpu",
                               targets=["onnx", "onnx-copy", "onnx-wrong"], reference="onnx-copy")
    st = result.status
    assert st.samples.reference == {"key": "onnx-copy", "runner": "onnxruntime-cpu"}
    assert st.formats["onnx"].verified and st.formats["onnx-copy"].verified
    assert st.formats["onnx-wrong"].runners["onnxruntime-cpu"].verify.status == "failed"
    # a reference that cannot be made stops the run with one clear error
    from navigator.errors import UserInputError

    with pytest.raises(UserInputError, match="--reference onnx-raise: that format was not converted"):
        navigator.convert(onnx_model("foldable_mlp"), workdir=tmp_path / "b", no_profile=True, device="cpu",
                          targets=["onnx"], reference="onnx-raise")


def test_default_reference_is_recorded(tmp_path, onnx_model):
    result = navigator.convert(onnx_model("foldable_mlp"), workdir=tmp_path, no_profile=True, device="cpu",
                               targets=["onnx"])
    assert result.status.samples.reference == {"key": "onnx", "runner": "onnxruntime-cpu",
                                               "options": {"graph_optimization_level": "disabled"},
                                               "variation": {"runner": "onnxruntime-cpu",
                                                             "options": {"graph_optimization_level": "all"}}}


def test_converter_defined_in_the_users_script_runs_in_process(tmp_path, onnx_model):
    """A converter class of the script's own __main__ cannot be imported by a worker:
    it runs in the calling process (isolated: false) instead of failing."""
    import subprocess

    script = tmp_path / "convert_here.py"
    script.write_text(textwrap.dedent("""
        import shutil, sys
        import navigator
        from navigator.converters.base import Converter
        from navigator.converters.registry import register

        @register
        class CopyHere(Converter):
            name = "test_copy_here"
            source = "onnx"
            target = "onnx-here"

            def convert(self, ctx):
                shutil.copyfile(ctx.source, ctx.output)

        r = navigator.convert(sys.argv[1], workdir=sys.argv[2], targets=["onnx", "onnx-here"], no_profile=True,
                              device="cpu")
        fs = r.status.formats["onnx-here"]
        print(r.ok, fs.convert.status, fs.isolated, fs.verified)
    """))
    r = subprocess.run([sys.executable, str(script), str(onnx_model("foldable_mlp")), str(tmp_path / "wd")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "True ok False True"
