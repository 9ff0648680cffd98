"""navigator convert-many on a real Ray cluster of several nodes on this machine
(``ray.cluster_utils.Cluster``: a head without CPUs and one-CPU workers, each offering
``navigator_profile``), and without Ray. Each workspace is compared with what ``navigator
convert`` writes for the same model run on its own.

Ray's session files live under the test's tmp_path (through a short symlink in /tmp: Ray's
socket paths may not exceed 107 bytes) and its auth token in the environment, not in ~/.ray;
every test checks that no process of its cluster or of navigator outlives it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ..conftest import interruptible, models, one_line_error

pytestmark = pytest.mark.functional

ZOO = ["token_classifier", "topk_model", "foldable_mlp", "small_cnn"]
# six models: four kinds, two of them twice with other weights
ZOO6 = [(name, {}) for name in ZOO] + [("foldable_mlp", {"seed": 7}), ("token_classifier", {"seed": 5})]
OPTIONS = {"targets": ["onnx", "onnx-optimized"], "device": "cpu", "no_profile": True, "max_batch_size": 4,
           "timeout": 120}
CLI_OPTIONS = ["--targets", "onnx,onnx-optimized", "--device", "cpu", "--no-profile", "--max-batch-size", "4",
               "--timeout", "120"]


def _make_zoo(folder: Path, entries=ZOO6) -> list[Path]:
    paths = []
    for i, (name, kwargs) in enumerate(entries):
        stem = name if not kwargs else f"{name}_{i}"
        paths.append(models.save(models.ALL[name](**kwargs), folder / f"{stem}.onnx"))
    return paths


def _manifest(path: Path, model_paths, defaults=None, **top) -> Path:
    data = {"defaults": dict(OPTIONS if defaults is None else defaults),
            "models": [os.path.relpath(p, path.parent) for p in model_paths], **top}
    path.write_text(yaml.safe_dump(data))
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def content(ws: Path) -> dict:
    """What must not depend on where or how a workspace was made: its files (but placement.yaml,
    convert-many's own), its artifacts' bytes, the model, samples and signature, every format's
    statuses and verdicts, best."""
    st = yaml.safe_load((ws / "status.yaml").read_text())
    # jobs/ holds the last run's job files: a resumed run that reused everything has none
    files = sorted(str(p.relative_to(ws)) for p in ws.rglob("*")
                   if p.is_file() and p.name != "placement.yaml" and p.relative_to(ws).parts[0] != "jobs")
    formats = {}
    for key, fs in st["formats"].items():
        formats[key] = {"convert": fs["convert"]["status"], "exporter": fs["convert"].get("exporter"),
                        "artifact": _sha(ws / fs["path"]) if fs["convert"]["status"] == "ok" else None,
                        "runners": {rk: {"verify": rs["verify"]["status"], "profile": rs["profile"]["status"],
                                         "outputs": {o: c["passed"] for o, c in rs["verify"]["outputs"].items()}}
                                    for rk, rs in fs["runners"].items()}}
    best = st.get("best") or {}
    return {"state": st["state"], "model": st["model"]["sha256"], "samples": st["samples"]["sha256"],
            "signature": st["signature"], "formats": formats, "files": files,
            "best": (best.get("key"), best.get("runner"), best.get("basis"))}


def assert_same(made: dict, reference: dict) -> None:
    """Every workspace as navigator convert wrote it; on a difference, say where."""
    assert sorted(made) == sorted(reference)
    problems = []
    for name, want in reference.items():
        got = made[name]
        for key in want:
            if got[key] == want[key]:
                continue
            if key == "files":
                problems.append(f"{name}: files only here {sorted(set(got[key]) - set(want[key]))}, "
                                f"missing {sorted(set(want[key]) - set(got[key]))}")
            else:
                problems.append(f"{name}: {key}: {got[key]} != {want[key]}")
    assert not problems, problems


@pytest.fixture(scope="module")
def zoo6(tmp_path_factory):
    return _make_zoo(tmp_path_factory.mktemp("zoo6"))


@pytest.fixture(scope="module")
def one_at_a_time(zoo6, tmp_path_factory):
    """The reference: `navigator convert` on each model of the zoo, one after another."""
    workdir = tmp_path_factory.mktemp("one_at_a_time")
    for path in zoo6:
        r = subprocess.run([sys.executable, "-m", "navigator", "convert", str(path), "--workdir", str(workdir),
                            *CLI_OPTIONS], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    return {p.name[: -len(".nav.workspace")]: content(p) for p in workdir.iterdir()}


def _processes(needle: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", needle], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if "pgrep" not in line]


@contextlib.contextmanager
def ray_environment(tmp_path: Path):
    """RAY_TMPDIR (a short symlink into tmp_path) and a token in the environment, for the
    cluster and the CLI's subprocesses; afterwards, no process that names the folder."""
    pytest.importorskip("ray")
    from navigator.many.cluster import auth_token_env, restore_env

    (tmp_path / "ray").mkdir(exist_ok=True)
    link = Path(f"/tmp/nvr-{secrets.token_hex(4)}")
    link.symlink_to(tmp_path / "ray")
    before = {"RAY_TMPDIR": os.environ.get("RAY_TMPDIR")}
    os.environ["RAY_TMPDIR"] = str(link)
    before.update(auth_token_env())
    try:
        yield link
    finally:
        restore_env(before)
        deadline = time.monotonic() + 30
        while _processes(str(link)) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _processes(str(link))
        link.unlink()
        assert not left, f"Ray processes outlived the test: {left[:3]}"


@contextlib.contextmanager
def ray_cluster(tmp_path: Path, workers: int = 3):
    """A head node without CPUs (nothing of ours runs there) and ``workers`` one-CPU nodes."""
    with ray_environment(tmp_path):
        from ray.cluster_utils import Cluster

        from navigator.many.cluster import PROFILE_RESOURCE

        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
        try:
            for _ in range(workers):
                cluster.add_node(num_cpus=1, resources={PROFILE_RESOURCE: 1.0})
            cluster.wait_for_nodes()
            yield cluster
        finally:
            cluster.shutdown()


def _placements(workdir: Path) -> dict[str, dict]:
    return {p.parent.name[: -len(".nav.workspace")]: yaml.safe_load(p.read_text())
            for p in workdir.glob("*.nav.workspace/placement.yaml")}


def _attempts(workdir: Path) -> list[dict]:
    return [{**a, "model": name} for name, data in _placements(workdir).items() for a in data["attempts"]]


def _max_concurrent(attempts: list[dict]) -> int:
    events = sorted([(a["started"], 1) for a in attempts] + [(a["ended"], -1) for a in attempts])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def _no_navigator_workers(workdir: Path) -> None:
    assert not _processes(f"navigator._worker {workdir}"), _processes(f"navigator._worker {workdir}")


# --------------------------------------------------------------------------- without a cluster
def test_bad_manifest_is_one_line_before_any_work(tmp_path, cli, onnx_model):
    model = onnx_model("foldable_mlp")
    manifest = tmp_path / "zoo.yaml"
    manifest.write_text(yaml.safe_dump({"defaults": {"targets": ["onnx"]},
                                        "models": [str(model), {"model": str(model), "model_name": "x",
                                                                "max_batch_sise": 4}]}))
    r = cli("convert-many", manifest, "--workdir", tmp_path / "wd")
    one_line_error(r, "models[1]", "unknown option(s) max_batch_sise")
    assert not (tmp_path / "wd").exists()
    one_line_error(cli("convert-many", tmp_path / "missing.yaml"), "no such file")
    one_line_error(cli("convert-many", manifest, "--max-parallel", "0"), "--max-parallel")


@pytest.mark.parametrize("answer", [b"HTTP/1.1 400 Bad Request\r\n\r\n", None])
def test_a_ray_address_where_something_else_listens_is_refused_at_once(tmp_path, cli, onnx_model, answer):
    """A web server (or a silent listener) at --ray-address: ray.init retried it for minutes; the
    probe's HTTP/2 preface gets no gRPC settings frame and the run ends in one line."""
    import socket
    import threading
    import time

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            if answer:
                conn.sendall(answer)
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    manifest = tmp_path / "zoo.yaml"
    manifest.write_text(yaml.safe_dump({"defaults": {"targets": ["onnx"]},
                                        "models": [str(onnx_model("foldable_mlp"))]}))
    t0 = time.monotonic()
    try:
        r = cli("convert-many", manifest, "--workdir", tmp_path / "wd", "--ray-address",
                f"127.0.0.1:{srv.getsockname()[1]}", timeout=120)
    finally:
        srv.close()
    one_line_error(r, "--ray-address", "does not answer as a Ray head node")
    assert time.monotonic() - t0 < 60


def test_without_ray_models_run_one_at_a_time(tmp_path, onnx_model):
    """Ray blocked (an import of it fails): the models run in this process, one after another,
    with a line saying how to run them in parallel; the workspaces are navigator convert's."""
    paths = _make_zoo(tmp_path / "models", [("foldable_mlp", {}), ("topk_model", {})])
    manifest = _manifest(tmp_path / "zoo.yaml", paths)
    code = ("import sys\nsys.modules['ray'] = None\nfrom navigator.cli.main import main\n"
            f"sys.exit(main(['convert-many', {str(manifest)!r}, '--workdir', {str(tmp_path / 'wd')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Ray is not installed: the 2 models run one at a time" in r.stdout
    assert "pip install 'navigator[ray]'" in r.stdout
    for name in ("foldable_mlp", "topk_model"):
        ws = tmp_path / "wd" / f"{name}.nav.workspace"
        assert yaml.safe_load((ws / "status.yaml").read_text())["state"] == "complete"
        attempts = yaml.safe_load((ws / "placement.yaml").read_text())["attempts"]
        assert [(a["phase"], a["node"], a["outcome"]) for a in attempts] == [("full", "local", "ok")]
    summary = (tmp_path / "wd" / "summary.md").read_text()
    assert "one at a time (no Ray)" in summary and "| foldable_mlp | ✅ ok |" in summary


def test_api_with_a_mapping(tmp_path, monkeypatch):
    """navigator.convert_many on a mapping; Ray reported missing (monkeypatched: the CLI test above
    hides the real module) so the models run in this process. A model that fails as bad input
    while running does not stop the others, and the worst model decides the exit code."""
    import navigator
    from navigator.many import run as many_run

    monkeypatch.setattr(many_run, "ray_installed", lambda: False)
    good = models.save(models.foldable_mlp(), tmp_path / "good.onnx")
    bad = models.save(models.foldable_mlp(), tmp_path / "bad.onnx")
    manifest = {"defaults": OPTIONS, "models": [str(good), {"model": str(bad), "compare": {"nosuch": "exact"}}]}
    result = navigator.convert_many(manifest, workdir=tmp_path / "wd", progress=False)
    assert [m.result for m in result.models] == ["ok", "error"] and result.exit_code == 2
    assert "nosuch" in result.models[1].message and not result.parallel
    assert result.result("good").status.state == "complete"
    assert result.summary_path == tmp_path / "wd" / "summary.md" and "❌ error" in result.summary_path.read_text()


# --------------------------------------------------------------------------- on a cluster
@pytest.mark.slow
def test_zoo_on_three_nodes_matches_one_at_a_time(tmp_path, cli, zoo6, one_at_a_time):
    """Six models on a three-node cluster: in parallel, on several nodes, each workspace the same as
    navigator convert's; a re-run reuses every step; the gate checks them all in one JUnit file."""
    manifest = _manifest(tmp_path / "zoo.yaml", zoo6)
    workdir = tmp_path / "wd"
    with ray_cluster(tmp_path) as cluster:
        r = cli("convert-many", manifest, "--workdir", workdir, "--ray-address", cluster.address)
        assert r.returncode == 0, r.stdout + r.stderr
        made = {p.name[: -len(".nav.workspace")]: content(p) for p in workdir.glob("*.nav.workspace")}
        assert_same(made, one_at_a_time)
        attempts = _attempts(workdir)
        assert len(attempts) == 6 and {a["phase"] for a in attempts} == {"full"}
        assert len({a["node"] for a in attempts}) >= 2, attempts
        assert _max_concurrent(attempts) >= 2, attempts
        # the table: console and summary.md, one row per model, one column per format
        summary = (workdir / "summary.md").read_text()
        assert "| model | result | onnx | onnx-optimized | best | nodes | retries |" in summary
        assert summary.count("| ✅ ok | ✅ ok | ✅ ok |") == 6
        assert "6 models (6 ok) in parallel on Ray" in r.stdout

        # a re-run resumes every workspace: nothing is converted or verified again (the source's
        # export, a copy of the model file, is redone by every navigator convert run)
        def steps():
            return {n: {k: {s: v for s, v in by.items() if s != "export"} for k, by in d["steps"].items()}
                    for n, d in _placements(workdir).items()}

        steps_before = steps()
        assert all(sum(map(len, d.values())) >= 4 for d in steps_before.values()), steps_before
        again = cli("convert-many", manifest, "--workdir", workdir, "--ray-address", cluster.address)
        assert again.returncode == 0, again.stderr
        assert steps() == steps_before
        assert_same({p.name[: -len(".nav.workspace")]: content(p) for p in workdir.glob("*.nav.workspace")}, made)
        _no_navigator_workers(workdir)

    # one verdict for the zoo
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"require_formats": ["onnx", "onnx-optimized"]}))
    gate = cli("gate", workdir, "--policy", policy, "--junit", tmp_path / "out.xml")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    import xml.etree.ElementTree as ET

    root = ET.parse(tmp_path / "out.xml").getroot()
    suites = root.findall("testsuite")
    assert sorted(s.get("name") for s in suites) == sorted(f"navigator-gate.{n}" for n in made)
    assert root.get("failures") == "0" and int(root.get("tests")) == sum(int(s.get("tests")) for s in suites)
    assert all((workdir / f"{n}.nav.workspace" / "report" / "gate.json").is_file() for n in made)
    # the same gate fails when one model lacks a required format: the zoo's verdict can fail
    policy.write_text(yaml.safe_dump({"require_formats": ["onnx", "openvino"]}))
    failed = cli("gate", workdir, "--policy", policy, "--junit", tmp_path / "out.xml")
    assert failed.returncode == 1 and "workspaces failed" in failed.stderr
    assert ET.parse(tmp_path / "out.xml").getroot().get("failures") == "6"


@pytest.mark.slow
def test_a_node_lost_mid_run_loses_nothing(tmp_path, zoo6, one_at_a_time):
    """A node removed while a model runs on it: that model's phase runs again on another node
    (recorded in placement.yaml), the run finishes, every workspace is navigator convert's."""
    manifest = _manifest(tmp_path / "zoo.yaml", zoo6)
    workdir = tmp_path / "wd"
    with ray_cluster(tmp_path) as cluster:
        proc = subprocess.Popen([sys.executable, "-m", "navigator", "convert-many", str(manifest), "--workdir",
                                 str(workdir), "--ray-address", cluster.address], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        victim = None
        deadline = time.monotonic() + 120
        while victim is None and time.monotonic() < deadline and proc.poll() is None:
            # a model whose attempt has finished a step on its node (besides the source's export, which
            # every run redoes) and is still running there
            for name, data in _placements(workdir).items():
                running = [a for a in data.get("attempts") or [] if a["outcome"] == "running"]
                done_there = [s for steps in (data.get("steps") or {}).values() for k, s in steps.items()
                              if running and k != "export" and s["node"] == running[0]["node"]
                              and s["run"] == data["run"]["id"]]
                if running and done_there:
                    victim = (name, running[0]["node"])
                    break
            time.sleep(0.05)
        assert victim is not None, "no model was seen running"
        node = next(n for n in cluster.worker_nodes if n.node_id == victim[1])
        cluster.remove_node(node, allow_graceful=False)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, out + err
        assert "lost: NodeDiedError" in out or "lost: WorkerCrashedError" in out, out
        made = {p.name[: -len(".nav.workspace")]: content(p) for p in workdir.glob("*.nav.workspace")}
        assert_same(made, one_at_a_time)
        data = _placements(workdir)[victim[0]]
        lost = [a for a in data["attempts"] if a["outcome"] == "lost"]
        assert lost and lost[0]["node"] == victim[1] and "Error" in lost[0]["reason"]
        retry = next(a for a in data["attempts"] if a.get("retry_of") == lost[0]["attempt"])
        assert retry["outcome"] == "ok" and retry["node"] != victim[1]
        # what the lost attempt finished was kept and reused, and says where it ran
        assert any(s["attempt"] == lost[0]["attempt"] and s["node"] == victim[1]
                   for steps in data["steps"].values() for k, s in steps.items() if k != "export"), data
        assert "| 1 |" in (workdir / "summary.md").read_text()    # the retries column
        _no_navigator_workers(workdir)


@pytest.mark.slow
def test_ctrl_c_stops_every_job_and_a_rerun_resumes(tmp_path, zoo6, one_at_a_time):
    """Ctrl-C while jobs run: every job stops, every workspace is resumable, a re-run completes them
    as one-at-a-time runs would. A seventh model's factory waits while a marker file exists, so the
    manifest cannot finish before the signal however fast the machine is (no timing)."""
    marker, holding = tmp_path / "hold", tmp_path / "holding"
    marker.write_text("")
    (tmp_path / "held.py").write_text(f"""
import os, time
def held():
    import torch
    if os.path.exists({str(marker)!r}):
        open({str(holding)!r}, "w").close()
    while os.path.exists({str(marker)!r}):
        time.sleep(0.05)
    torch.manual_seed(0)
    return torch.nn.Linear(8, 4)
""")
    manifest = tmp_path / "zoo.yaml"
    manifest.write_text(yaml.safe_dump({"defaults": dict(OPTIONS), "models": [
        os.path.relpath(p, tmp_path) for p in zoo6] + [{"model": "held.py:held", "shapes": "input:4x8"}]}))
    workdir = tmp_path / "wd"
    with ray_cluster(tmp_path, workers=2) as cluster:
        cmd = [sys.executable, "-m", "navigator", "convert-many", str(manifest), "--workdir", str(workdir),
               "--ray-address", cluster.address]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                                preexec_fn=interruptible)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not holding.exists():
            time.sleep(0.05)        # the held model's factory runs: the manifest cannot be done
        assert holding.exists(), "the held model never started"
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            marker.unlink()
        assert proc.returncode == 130, out + err
        assert "Traceback" not in err and "interrupted" in err
        attempts = _attempts(workdir)
        assert attempts and all(a["outcome"] in ("ok", "interrupted") for a in attempts), attempts
        assert any(a["outcome"] == "interrupted" for a in attempts)
        for ws in workdir.glob("*.nav.workspace"):
            if (ws / "status.yaml").is_file():
                assert yaml.safe_load((ws / "status.yaml").read_text())["state"] in ("complete", "interrupted")
        _no_navigator_workers(workdir)
        assert not list(workdir.glob(".convert-many-*")), "the run's token or stop file was left behind"
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert again.returncode == 0, again.stdout + again.stderr
        made = {p.name[: -len(".nav.workspace")]: content(p) for p in workdir.glob("*.nav.workspace")}
        held = made.pop("held")
        assert held["state"] == "complete" and held["formats"]["onnx"]["runners"]["onnxruntime-cpu"]["verify"] == "ok"
        assert_same(made, one_at_a_time)


@pytest.mark.slow
def test_local_ray_measures_alone(tmp_path, cli):
    """Without --ray-address: Ray started for the run on this machine, and gone after it. Profiled
    models run in two phases; no measurement ever shared the node with another of our tasks."""
    paths = _make_zoo(tmp_path / "models", [("foldable_mlp", {}), ("topk_model", {}), ("small_cnn", {})])
    manifest = _manifest(tmp_path / "zoo.yaml", paths, defaults={
        "targets": ["onnx", "onnx-optimized"], "device": "cpu", "max_batch_size": 4, "profile_budget_s": 1,
        "profile_batch_sizes": [1, 4]})
    with ray_environment(tmp_path) as link:
        r = cli("convert-many", manifest, "--workdir", tmp_path / "wd")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "on a local Ray instance" in r.stdout
        assert not [p for p in link.iterdir()], "the local Ray's session folder was not removed"
    attempts = _attempts(tmp_path / "wd")
    assert sorted(a["phase"] for a in attempts) == ["build"] * 3 + ["measure"] * 3
    from navigator.many.placement import beside_measurements

    assert beside_measurements(attempts) == []
    for ws in (tmp_path / "wd").glob("*.nav.workspace"):
        st = yaml.safe_load((ws / "status.yaml").read_text())
        assert st["state"] == "complete" and st["best"]["basis"] == "profile"
        assert st["config"]["no_profile"] is False
        profiles = [rs["profile"] for fs in st["formats"].values() for rs in fs["runners"].values()]
        assert profiles and all(p["status"] == "ok" for p in profiles)
        steps = yaml.safe_load((ws / "placement.yaml").read_text())["steps"]
        by_phase = {a["attempt"]: a["phase"] for a in attempts if a["model"] == ws.name[: -len(".nav.workspace")]}
        # conversions in the build attempt, measurements in the measure attempt
        assert by_phase[steps["onnx-optimized"]["convert"]["attempt"]] == "build"
        assert {by_phase[s["attempt"]] for steps_of in steps.values() for k, s in steps_of.items()
                if k.startswith("profile")} == {"measure"}


def _held(tmp_path: Path) -> tuple[Path, Path]:
    """``held.py:held``, a factory that says it started (``holding``) and waits while ``marker``
    exists: a run that cannot finish before a signal, however fast the machine (no timing)."""
    marker, holding = tmp_path / "hold", tmp_path / "holding"
    marker.write_text("")
    (tmp_path / "held.py").write_text(f"""
import os, time
def held():
    import torch
    open({str(holding)!r}, "w").close()
    while os.path.exists({str(marker)!r}):
        time.sleep(0.05)
    torch.manual_seed(0)
    return torch.nn.Linear(8, 4)
""")
    return marker, holding


@pytest.mark.slow
@pytest.mark.parametrize("sig, moment", [(signal.SIGINT, "ray starting"), (signal.SIGTERM, "model running")])
def test_a_signal_on_local_ray_ends_with_a_summary(tmp_path, sig, moment):
    """Ctrl-C while the local Ray starts crashed the driver (exit 139, no summary.md); SIGTERM while
    a model ran printed Ray's stack dump, exited 1 and left its workspace `running`. Both now stop
    the run as Ctrl-C does: exit 130, summary.md, no workspace left `running`, no Ray process left."""
    marker, holding = _held(tmp_path)
    manifest = tmp_path / "zoo.yaml"
    manifest.write_text(yaml.safe_dump({"defaults": {"targets": ["onnx"], "device": "cpu", "no_profile": True},
                                        "models": [{"model": "held.py:held", "shapes": "input:4x8"}]}))
    workdir = tmp_path / "wd"
    with ray_environment(tmp_path) as link:
        proc = subprocess.Popen([sys.executable, "-m", "navigator", "convert-many", str(manifest), "--workdir",
                                 str(workdir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=tmp_path, preexec_fn=interruptible)
        deadline = time.monotonic() + 120
        started = (lambda: any(link.iterdir())) if moment == "ray starting" else holding.exists
        while time.monotonic() < deadline and proc.poll() is None and not started():
            time.sleep(0.02)
        assert started(), f"never reached: {moment}"
        proc.send_signal(sig)
        try:
            out, err = proc.communicate(timeout=120)
        finally:
            marker.unlink()
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and "interrupted" in err and (workdir / "summary.md").is_file()
    for ws in workdir.glob("*.nav.workspace"):
        if (ws / "status.yaml").is_file():
            assert yaml.safe_load((ws / "status.yaml").read_text())["state"] != "running"
    _no_navigator_workers(workdir)


def test_two_runs_on_one_workdir_do_not_collide(tmp_path):
    """A second convert-many on a workdir another one is using: one line, exit 2, nothing of the
    first run touched (both wrote summary.md and half-shared the models). Ray blocked: in order."""
    marker, holding = _held(tmp_path)
    manifest = tmp_path / "zoo.yaml"
    manifest.write_text(yaml.safe_dump({"defaults": {"targets": ["onnx"], "device": "cpu", "no_profile": True},
                                        "models": [{"model": "held.py:held", "shapes": "input:4x8"}]}))
    code = ("import sys\nsys.modules['ray'] = None\nfrom navigator.cli.main import main\n"
            f"sys.exit(main(['convert-many', {str(manifest)!r}, '--workdir', {str(tmp_path / 'wd')!r}]))")
    first = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and first.poll() is None and not holding.exists():
            time.sleep(0.05)
        assert holding.exists(), "the first run never started its model"
        second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                                cwd=tmp_path)
        one_line_error(second, "is in use by another navigator run")
        assert not (tmp_path / "wd" / "summary.md").exists()
    finally:
        marker.unlink()
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, out + err
    assert (tmp_path / "wd" / "summary.md").is_file() and not (tmp_path / "wd" / ".convert-many.lock").exists()
