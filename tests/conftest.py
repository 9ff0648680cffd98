import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("navigator_test_models", Path(__file__).parent / "models.py")
models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(models)

FAST = ["--profile-budget-s", "1", "--max-batch-size", "4", "--timeout", "120", "--device", "cpu"]


def pytest_configure(config):
    """A home of this session's own (HOME and the XDG folders in a temporary folder, removed at the
    end): what a test writes there is this session's, so the check that nothing is written outside
    tmp_path (tests/functional/conftest.py) holds while another suite, or a person, uses the real
    home at the same time. The prepared Triton environment stays where it is (NAVIGATOR_CACHE)."""
    import shutil
    import tempfile

    from navigator.triton.server_env import cache_dir

    os.environ.setdefault("NAVIGATOR_CACHE", str(cache_dir().parent))
    home = Path(tempfile.mkdtemp(prefix="navigator-test-home-"))
    os.environ["HOME"] = str(home)
    for var, sub in (("XDG_CACHE_HOME", ".cache"), ("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share")):
        (home / sub).mkdir(parents=True)
        os.environ[var] = str(home / sub)
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))


@pytest.fixture
def onnx_model(tmp_path):
    """Write one of tests/models.py's models into tmp_path and return its path."""

    def make(name: str = "token_classifier", **kwargs) -> Path:
        return models.save(models.ALL[name](**kwargs), tmp_path / "models" / f"{name}.onnx")

    return make


@pytest.fixture
def cli(tmp_path):
    """Run the real `navigator` CLI in a subprocess; returns CompletedProcess."""

    def run(*args, env=None, cwd=None, timeout=300):
        full_env = dict(os.environ)
        for key, value in (env or {}).items():   # PYTHONPATH is prepended, not replaced
            old = full_env.get(key) if key == "PYTHONPATH" else None
            full_env[key] = f"{value}{os.pathsep}{old}" if old else value
        return subprocess.run([sys.executable, "-m", "navigator", *map(str, args)], capture_output=True, text=True,
                              env=full_env, cwd=cwd or tmp_path, timeout=timeout)

    return run


def one_line_error(r, *needles):
    """A CLI result that failed as bad input: exit 2, one `error:` line holding every
    needle, no traceback. Returns the line."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: "), lines
    assert "Traceback" not in r.stderr + r.stdout
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def importable(name: str) -> bool:
    """The package imports here (installed, and its own imports work: transformers' model
    classes need torch, matplotlib its backend)."""
    import importlib

    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def stage_times(ws: Path) -> dict[str, dict[str, float]]:
    """From a workspace's navigator.log: ``{"torch verify [torch-cpu]": {"started": t, "ended": t}}``,
    times in seconds since the epoch (the progress lines every stage writes)."""
    import datetime
    import re

    line = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO navigator\.progress: (.+?): "
                      r"(started|ok|failed|skipped|inconclusive)\b")
    out: dict[str, dict[str, float]] = {}
    for text in (ws / "navigator.log").read_text(encoding="utf-8").splitlines():
        m = line.match(text)
        if m:
            t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out.setdefault(m.group(2), {})["started" if m.group(3) == "started" else "ended"] = t
    return out


def wait_for_worker(needle: str, proc, seconds: float = 120) -> None:
    """Until a process whose command line holds ``needle`` runs (a worker of the run ``proc``):
    tests that interrupt a run wait for a state, never for a time."""
    import subprocess
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if subprocess.run(["pgrep", "-f", needle], capture_output=True, text=True).stdout.strip():
            return
        time.sleep(0.1)
    raise AssertionError(f"no process matching {needle!r} started (the run ended with {proc.poll()})")


def interruptible() -> None:
    """``preexec_fn`` for a run a test will Ctrl-C: SIGINT back to its default in the child. A
    shell starts background commands (``bash .ci/run &``) with SIGINT ignored, and Python keeps an
    inherited SIG_IGN instead of raising KeyboardInterrupt, as it should; the test's own run must
    still be interruptible."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
