"""convert-many without a cluster: the manifest's checks, the phases' options, placement.yaml,
the summary cells and the cluster feasibility check (pure functions on recorded data)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from navigator.errors import UserInputError
from navigator.many import placement
from navigator.many.cluster import BUILD_SHARE, PROFILE_RESOURCE, check_feasible, task_resources
from navigator.many.manifest import Resources, load_manifest
from navigator.many.node import phase_options
from navigator.many.schedule import phases_of
from navigator.workspace.layout import Workspace

MODELS = Path(__file__).resolve().parents[1] / "models.py"


@pytest.fixture
def zoo(tmp_path):
    """A manifest folder with two model files (their content does not matter here: nothing is opened)."""
    (tmp_path / "m").mkdir()
    for name in ("a.onnx", "b.onnx"):
        (tmp_path / "m" / name).write_bytes(b"not read")
    (tmp_path / "m" / "net.py").write_text("def make():\n    pass\n")

    def write(data) -> Path:
        path = tmp_path / "zoo.yaml"
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
        return path

    return write


def _error(path, workdir=None) -> str:
    with pytest.raises(UserInputError) as e:
        load_manifest(path, workdir=workdir)
    line = e.value.one_line()
    assert "\n" not in line
    return line


def test_manifest_models_over_defaults(zoo, tmp_path):
    path = zoo({"defaults": {"targets": ["onnx"], "max-batch-size": 8, "samples": "data"},
                "resources": {"cpus": 2},
                "models": ["m/a.onnx", {"model": "m/b.onnx", "max_batch_size": 4, "model_name": "bee",
                                        "resources": {"gpus": 1, "accelerator_type": "H100"}},
                           {"model": "m/net.py:make", "shapes": "x:8x3", "device": "cuda"}]})
    m = load_manifest(path, workdir=tmp_path / "wd")
    a, b, net = m.models
    assert m.workdir == (tmp_path / "wd").resolve() and m.retries == 2 and m.path == str(path.resolve())
    assert a.model == str((tmp_path / "m" / "a.onnx").resolve()) and a.name == "a"
    assert a.config.targets == ("onnx",) and a.config.max_batch_size == 8
    assert a.options["samples"] == str((tmp_path / "data").resolve())          # relative to the manifest
    assert a.options["workdir"] == str(m.workdir) and a.config.workdir == str(m.workdir)
    assert b.name == "bee" and b.config.max_batch_size == 4
    assert b.resources == Resources(cpus=2.0, gpus=1.0, accelerator_type="H100")
    assert net.model.endswith("net.py:make") and net.name == "net" and net.is_factory and not a.is_factory
    assert net.config.shapes == ({"x": (8, 3)},)
    assert net.resources.gpus == 1.0            # device: cuda asks for a GPU
    assert a.resources == Resources(cpus=2.0)


@pytest.mark.parametrize("data, needles", [
    ({"models": ["m/a.onnx"], "extra": 1}, ["unknown key(s) extra", "valid: defaults, models"]),
    ({"models": []}, ["models: expected a non-empty list"]),
    ({"models": ["m/a.onnx", {"model": "m/b.onnx", "max_batch": 4}]},
     ["models[1] (m/b.onnx): unknown option(s) max_batch"]),
    ({"models": [{"model": "m/a.onnx", "max_batch_size": "many"}]}, ["models[0] (m/a.onnx)", "max_batch_size"]),
    ({"models": [{"model": "m/a.onnx", "device": "tpu"}]}, ["device: 'tpu' is not one of"]),
    ({"models": [{"model": "m/a.onnx", "targets": ["onnx", "nosuchformat"]}]},
     ["models[0] (m/a.onnx): targets:", "nosuchformat"]),
    ({"models": ["m/missing.onnx"]}, ["models[0] (m/missing.onnx): m/missing.onnx: no such file"]),
    ({"models": ["m/nope.py:make"]}, ["models[0] (m/nope.py:make): m/nope.py: no such file"]),
    ({"models": [{"model": "m/a.onnx", "workdir": "x"}]}, ["workdir cannot be set here"]),
    ({"defaults": {"config_path": "x.yaml"}, "models": ["m/a.onnx"]}, ["defaults: config_path cannot be set"]),
    ({"models": ["m/a.onnx", {"model": "m/b.onnx", "model_name": "a"}]},
     ["models[0] (m/a.onnx) and models[1] (m/b.onnx) would share the workspace a.nav.workspace"]),
    ({"models": [{"model": "m/a.onnx", "resources": {"cpu": 2}}]}, ["unknown key(s) cpu; valid: cpus"]),
    ({"models": [{"model": "m/a.onnx", "resources": {"cpus": 0}}]}, ["resources.cpus: expected a number > 0"]),
    ({"models": [{"model": "m/a.onnx", "resources": {"accelerator_type": "H100"}}]}, ["needs gpus >= 1"]),
    ({"retries": -1, "models": ["m/a.onnx"]}, ["retries: expected an integer >= 0"]),
    ({"models": [{"targets": ["onnx"]}]}, ["models[0]: needs model:"]),
])
def test_manifest_mistakes_are_one_line(zoo, data, needles):
    line = _error(zoo(data))
    for needle in needles:
        assert needle in line, line


def test_manifest_refuses_yaml_aliases(zoo):
    line = _error(zoo("defaults: &d {targets: [onnx]}\nmodels:\n  - {model: m/a.onnx, converter_params: *d}\n"))
    assert "line 3" in line and "YAML aliases (*d) are not accepted" in line
    # the same content written out is fine: the refusal is about aliases, not the values
    load_manifest(zoo("defaults: {targets: [onnx]}\nmodels:\n  - {model: m/a.onnx}\n"))


def test_manifest_refuses_a_file_as_workdir(zoo, tmp_path):
    (tmp_path / "file").write_text("x")
    assert "is a file" in _error(zoo({"models": ["m/a.onnx"]}), workdir=tmp_path / "file")


def test_default_name_is_what_open_source_names(tmp_path):
    """The manifest names workspaces without opening models: the same names navigator convert gives."""
    import importlib.util

    from navigator.sources import default_name, open_source

    spec = importlib.util.spec_from_file_location("navigator_test_models", MODELS)
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    path = models.save(models.ALL["foldable_mlp"](), tmp_path / "my.model.onnx")
    assert default_name(path) == open_source(str(path)).name == "my.model"
    assert default_name("dir/net.py:make") == "net"
    saved = tmp_path / "resnet" / "1"
    saved.mkdir(parents=True)
    assert default_name(saved) == "resnet"


def test_phase_options():
    options = {"targets": ["onnx"], "force": True, "triton_repo": "/r"}
    assert phase_options(options, "build") == {"targets": ["onnx"], "force": True}     # no repository before measuring
    assert phase_options(options, "measure") == {"targets": ["onnx"], "triton_repo": "/r"}   # resumes the build
    assert phase_options(options, "full") == options


def test_phases_and_task_resources(zoo):
    m = load_manifest(zoo({"models": ["m/a.onnx", {"model": "m/b.onnx", "no_profile": True,
                                                    "resources": {"gpus": 1, "memory_gb": 2,
                                                                  "accelerator_type": "L4"}}]}))
    a, b = m.models
    assert phases_of(a) == ["build", "measure"] and phases_of(b) == ["full"] and phases_of(a, False) == ["full"]
    assert task_resources(a.resources, "build") == {"num_cpus": 1.0, "num_gpus": 0.0,
                                                    "resources": {PROFILE_RESOURCE: BUILD_SHARE}}
    assert task_resources(a.resources, "measure")["resources"] == {PROFILE_RESOURCE: 1.0}   # the whole node
    assert task_resources(b.resources, "full") == {"num_cpus": 1.0, "num_gpus": 1.0, "memory": 2 << 30,
                                                   "accelerator_type": "L4",
                                                   "resources": {PROFILE_RESOURCE: BUILD_SHARE}}


def _node(**resources):
    return {"id": "n", "ip": "10.0.0.1", "resources": resources}


def test_check_feasible(zoo):
    m = load_manifest(zoo({"models": ["m/a.onnx", {"model": "m/b.onnx", "resources": {"gpus": 1,
                                                                                      "accelerator_type": "H100"}}]}))
    gpu = _node(CPU=8, GPU=1, **{PROFILE_RESOURCE: 1, "accelerator_type:H100": 1})
    check_feasible(m, [_node(CPU=2, **{PROFILE_RESOURCE: 1}), gpu], phases_of)
    with pytest.raises(UserInputError, match=r"models\[1\] \(m/b.onnx\): its build task needs .*GPU 1.*"
                                             r"accelerator_type:H100"):
        check_feasible(m, [_node(CPU=8, GPU=1, **{PROFILE_RESOURCE: 1, "accelerator_type:A100": 1})], phases_of)
    with pytest.raises(UserInputError, match="no node of the Ray cluster offers the resource navigator_profile"):
        check_feasible(m, [_node(CPU=8, GPU=1, **{"accelerator_type:H100": 1})], phases_of)
    with pytest.raises(UserInputError, match="no alive node"):
        check_feasible(m, [], phases_of)


def test_placement_records_attempts_and_steps(tmp_path):
    ws = Workspace(tmp_path / "a.nav.workspace")
    placement.begin_run(ws, {"id": "r1"})
    placement.start_attempt(ws, {"attempt": 1, "phase": "build", "node": "n1", "started": placement.now()})
    placement.record_step(ws, "onnx", "convert", {"attempt": 1, "node": "n1", "run": "r1"})
    placement.record_step(ws, "gone", "convert", {"attempt": 1, "node": "n1", "run": "r1"})
    placement.end_attempt(ws, 1, "lost", "node died")
    placement.end_attempt(ws, 1, "ok")                   # an attempt that ended keeps its word
    placement.keep_steps_of(ws, ["onnx"])
    data = placement.load(ws)
    assert [(a["attempt"], a["outcome"], a["reason"]) for a in data["attempts"]] == [(1, "lost", "node died")]
    assert data["steps"] == {"onnx": {"convert": {"attempt": 1, "node": "n1", "run": "r1"}}}
    placement.begin_run(ws, {"id": "r2"})               # a new run: no attempts yet, earlier steps kept
    data = placement.load(ws)
    assert data["run"] == {"id": "r2"} and data["attempts"] == [] and "onnx" in data["steps"]
    placement.end_attempt(Workspace(tmp_path / "never.nav.workspace"), 1, "interrupted")
    assert not (tmp_path / "never.nav.workspace").exists()     # nothing written for an attempt that never began


def test_beside_measurements_can_fail():
    """The audit of 'measurements run alone' on recorded attempts, with its negative control."""
    def a(model, phase, node, t0, t1):
        return {"model": model, "phase": phase, "attempt": 1, "node": node,
                "started": f"2026-01-01T00:00:{t0:02d}.000+00:00", "ended": f"2026-01-01T00:00:{t1:02d}.000+00:00"}

    alone = [a("x", "build", "n1", 0, 5), a("y", "build", "n1", 1, 6), a("x", "measure", "n1", 6, 9),
             a("y", "measure", "n1", 9, 12), a("z", "build", "n2", 7, 8)]
    assert placement.beside_measurements(alone) == []
    beside = alone + [a("z", "build", "n1", 8, 10)]         # a build on n1 during both measurements
    clashes = placement.beside_measurements(beside)
    assert len(clashes) == 2 and all("z build" in c for c in clashes)


def test_convert_many_help_imports_no_ray_nor_frameworks():
    import subprocess

    code = ("import sys\nsys.modules['ray'] = None\nfrom navigator.cli.main import main\n"
            "try:\n    main(['convert-many', '--help'])\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
            "print(sorted(m for m in ('numpy', 'onnx', 'torch', 'yaml', 'ray._private') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "MANIFEST" in out.stdout and "--ray-address" in out.stdout and "--max-parallel" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_readme_manifest_is_valid(tmp_path):
    """docs/how-to/convert-many.md: its manifest parses (with stand-in files at its paths)."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "docs" / "how-to" / "convert-many.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, flags=re.S) if b.startswith("defaults:"))
    (tmp_path / "models").mkdir()
    for name in ("a.onnx", "big.onnx"):
        (tmp_path / "models" / name).write_bytes(b"")
    (tmp_path / "models" / "m.py").write_text("def make():\n    pass\n")
    (tmp_path / "zoo.yaml").write_text(block)
    a, m, big = load_manifest(tmp_path / "zoo.yaml").models
    assert (a.name, m.name, big.name) == ("a", "m", "big") and m.config.atol == {"": 1e-3}
    assert big.resources == Resources(cpus=1.0, gpus=1.0, accelerator_type="H100")


def test_a_node_that_cannot_see_the_workdir_or_runs_another_navigator_says_so(tmp_path):
    """The check each task makes before it starts (navigator.many.node._check_node)."""
    from navigator._version import __version__
    from navigator.many.node import _check_node, run_phase

    token = tmp_path / ".convert-many-r1.token"
    token.write_text("r1")
    where = {"node": "0123456789abcdef", "host": "gpu-7"}
    request = {"workdir": str(tmp_path), "navigator_version": __version__, "token": {"path": str(token), "value": "r1"}}
    assert _check_node(request, where) is None
    other = {**request, "token": {"path": str(tmp_path / "elsewhere.token"), "value": "r1"}}
    assert "is not visible on node 0123456789ab (gpu-7)" in _check_node(other, where)
    stale = {**request, "token": {"path": str(token), "value": "r2"}}      # another run's token
    assert "not visible" in _check_node(stale, where)
    assert "has navigator" in _check_node({**request, "navigator_version": "0.0.1"}, where)
    out = run_phase({**other, "name": "m", "phase": "full", "attempt": 1, "run_id": "r1"}, where=where)
    assert (out["status"], out["exit_code"]) == ("error", 2) and "not visible" in out["message"]
    assert not (tmp_path / "m.nav.workspace").exists()      # nothing written where it could not see


def test_a_long_task_gets_a_progress_line_every_15_s():
    """convert-many is never silent during a long build: one line per running task every 15 s."""
    from navigator.many.schedule import Heartbeat

    lines, now = [], [0.0]

    class Reporter:
        def progress(self, key, stage, runner, elapsed_s):
            lines.append((key, stage, round(elapsed_s)))

    beat = Heartbeat(Reporter(), 15.0, clock=lambda: now[0])
    beat.started("a")
    for t in range(0, 50):
        now[0] = float(t)
        if t == 20:
            beat.started("b")
        if t == 40:
            beat.ended("a")
        running = {k: (f"model_{k}", "build") for k in ("a", "b") if k in beat._since}
        beat.tick(running)
    assert lines == [("model_a", "build", 15), ("model_a", "build", 30), ("model_b", "build", 15)]


def test_the_stop_file_interrupts_the_main_thread_once_and_never_after_disarm(tmp_path):
    """The Ctrl-C path of convert-many on Ray (node.StopWatch): the stop file raises KeyboardInterrupt
    in the main thread; a phase that starts after it does not run; a disarmed watch never fires. SIGINT
    is ignored here as in a process a shell started in the background: the watch fires all the same,
    and puts the disposition back."""
    import signal
    import time

    from navigator.many.node import StopWatch, run_phase

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        stop = tmp_path / "run.stop"
        quiet = StopWatch(str(stop))
        quiet.arm()
        quiet.disarm()
        watch = StopWatch(str(stop))
        watch.arm()
        stop.write_text("x")
        with pytest.raises(KeyboardInterrupt):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                time.sleep(0.01)
        watch.disarm()
        assert watch.fired and not quiet.fired
        time.sleep(2 * StopWatch.POLL_S)        # nothing pending after disarm
        request = {"name": "m", "phase": "full", "attempt": 1, "workdir": str(tmp_path), "stop": str(stop)}
        out = run_phase(request)
        assert (out["status"], out["exit_code"]) == ("interrupted", 130)
        assert out["message"] == "interrupted before it started"
        assert not (tmp_path / "m.nav.workspace").exists()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
