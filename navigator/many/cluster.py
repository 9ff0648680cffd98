"""Ray for one convert-many run: a local instance started for it, or an existing cluster.

Resources. Each model phase is one Ray task asking for its model's ``resources`` (CPU cores,
GPUs, Ray's logical ``memory``, and ``accelerator_type`` so engines are built on the GPU kind
they will run on) plus a share of :data:`PROFILE_RESOURCE`, a per-node resource of capacity 1:
a build takes :data:`BUILD_SHARE` of it, a measurement all of it. Ray therefore never places a
measurement beside another measurement or a build of ours on the same node, which is what
keeps profiles honest. A local instance declares the resource itself; nodes of an existing
cluster must be started with it (``ray start … --resources='{"navigator_profile": 1}'``),
checked before anything runs.

Hygiene. A local instance runs with Ray's token authentication on a fresh token passed through
the environment (Ray would otherwise write ``~/.ray/auth_token``; its ports are reachable from
the network), keeps its session files in a temporary folder that is removed at the end (kept
with ``keep_logs``), has no dashboard, and is shut down with every process it started (Ray
ties its daemons to the driver's life). Ray's
own processes block SIGINT (Ray does that), so Ctrl-C reaches the driver, which cancels the
tasks (:mod:`navigator.many.schedule`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from navigator.errors import UserInputError

log = logging.getLogger(__name__)

PROFILE_RESOURCE = "navigator_profile"
BUILD_SHARE = 0.001                      # up to 1000 builds per node; CPUs bound them long before that
OBJECT_STORE_BYTES = 96 * (1 << 20)      # tasks hand back small records; artifacts stay in the workdir
CONNECT_TIMEOUT_S = 5.0
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"   # + empty SETTINGS
_SOCKET_PATH_MAX = 60                    # Ray's sockets live below its temp dir: AF_UNIX paths end at 107 bytes


def _short_temp_parent() -> str:
    parent = os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()
    return parent if len(parent) <= _SOCKET_PATH_MAX else "/tmp"


def _probe(address: str) -> None:
    """Refuse an address nothing listens on, at once: ray.init retries such a one for minutes."""
    text = address.split("://", 1)[-1]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        if address == "auto":
            return
        raise UserInputError(f"--ray-address {address}: expected HOST:PORT of a Ray head node (or auto)")
    hint = "start the cluster with `ray start --head`, or leave --ray-address out to run on this machine"
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=CONNECT_TIMEOUT_S) as s:
            # a Ray head's GCS speaks gRPC: HTTP/2 answers a client preface with a SETTINGS frame. Anything
            # else listening there (a web server, a database) would have ray.init retry for minutes
            s.sendall(_H2_PREFACE)
            answer = b""
            while len(answer) < 9:
                chunk = s.recv(9 - len(answer))
                if not chunk:
                    break
                answer += chunk
    except socket.timeout:
        answer = b""
    except OSError as e:
        raise UserInputError(f"--ray-address {address}: cannot connect ({e.strerror or e})", hint=hint) from None
    if len(answer) < 9 or answer[3] != 0x04:
        raise UserInputError(f"--ray-address {address}: something listens there but does not answer as a Ray "
                             "head node's GCS (no gRPC / HTTP/2 settings frame within "
                             f"{CONNECT_TIMEOUT_S:.0f} s)", hint=hint)


class RaySession:
    """``with RaySession(address) as ray_session:`` Ray initialised for this process."""

    def __init__(self, address: str | None = None, *, keep_logs: bool = False):
        self.address = address
        self.keep_logs = keep_logs
        self.started = False          # a local instance of our own (shut down at the end)
        self.temp_dir: str | None = None
        self._env: dict[str, str | None] = {}

    def __enter__(self) -> "RaySession":
        import ray

        if ray.is_initialized():      # the caller's own session (the API inside a Ray driver): use it as is
            return self
        quiet = dict(log_to_driver=False, logging_level=logging.WARNING, configure_logging=True)
        if self.address:
            _probe(self.address)
            try:
                with self._deferred_signals():
                    ray.init(address=self.address, **quiet)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise UserInputError(f"--ray-address {self.address}: {' '.join(str(e).split())[:300]}") from None
            return self
        self.temp_dir = tempfile.mkdtemp(prefix="navigator-ray-", dir=_short_temp_parent())
        self._env.update(auth_token_env())
        try:
            with self._deferred_signals():
                ray.init(address="local", resources={PROFILE_RESOURCE: 1.0}, include_dashboard=False,
                         object_store_memory=OBJECT_STORE_BYTES, _temp_dir=self.temp_dir, **quiet)
        except BaseException:
            self._cleanup()
            raise
        self.started = True
        return self

    interrupted = False   # a Ctrl-C or SIGTERM came while Ray started: the caller stops once inside

    @contextlib.contextmanager
    def _deferred_signals(self):
        """Ctrl-C / SIGTERM while ray.init runs are noted, not raised: an exception in the middle of
        its native start crashed the process (exit 139, no summary). Our SIGTERM handler, which Ray's
        own would replace, is put back after."""
        import signal
        import threading

        from navigator.errors import stop_on_sigterm, stops_on_sigterm

        if threading.current_thread() is not threading.main_thread():
            yield
            return
        ours = stops_on_sigterm()

        def note(signum, frame):
            self.interrupted = True

        previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if ours:
                stop_on_sigterm()

    def __exit__(self, *exc) -> None:
        if self.started:
            import ray

            ray.shutdown()
        self._cleanup()

    def _cleanup(self) -> None:
        restore_env(self._env)
        self._env.clear()
        if self.temp_dir and not self.keep_logs:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    @staticmethod
    def nodes() -> list[dict]:
        """The alive nodes, each ``{"id", "ip", "resources"}``."""
        import ray

        return [{"id": n["NodeID"], "ip": n.get("NodeManagerAddress"), "resources": dict(n.get("Resources") or {})}
                for n in ray.nodes() if n.get("Alive")]


def auth_token_env() -> dict[str, str | None]:
    """Token authentication for a Ray instance this process starts: a fresh token in the
    environment (Ray's processes inherit it), unless the user set up authentication; Ray would
    otherwise write one into ~/.ray/auth_token. Returns the variables' earlier values, for
    :func:`restore_env`."""
    user_set = {"RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"} & set(os.environ)
    if user_set or os.environ.get("RAY_AUTH_MODE", "token") != "token":
        return {}
    before = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    if "ray" in sys.modules:   # Ray read its settings on import: make it read them again
        try:
            from ray._raylet import AuthenticationTokenLoader, Config

            Config.initialize("")
            AuthenticationTokenLoader.instance().reset_cache()
        except (ImportError, AttributeError) as e:   # pragma: no cover - another Ray version
            log.warning("could not pass the auth token to this Ray (%s)", e)
    return before


def restore_env(before: dict[str, str | None]) -> None:
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def task_resources(resources, phase: str) -> dict:
    """The Ray task options of one model phase (see the module docstring)."""
    opts: dict = {"num_cpus": resources.cpus, "num_gpus": resources.gpus,
                  "resources": {PROFILE_RESOURCE: 1.0 if phase == "measure" else BUILD_SHARE}}
    if resources.memory_gb:
        opts["memory"] = int(resources.memory_gb * (1 << 30))
    if resources.accelerator_type:
        opts["accelerator_type"] = resources.accelerator_type
    return opts


def _needs(opts: dict) -> dict[str, float]:
    need = {"CPU": opts["num_cpus"], "GPU": opts["num_gpus"], **opts["resources"]}
    if "memory" in opts:
        need["memory"] = opts["memory"]
    if "accelerator_type" in opts:
        need[f"accelerator_type:{opts['accelerator_type']}"] = 0.001
    return {k: v for k, v in need.items() if v}


def check_feasible(manifest, nodes: list[dict], phases_of) -> None:
    """Every model phase fits on at least one alive node; else one line before any work (Ray
    would keep such a task pending for ever)."""
    if not nodes:
        raise UserInputError("the Ray cluster has no alive node")
    for entry in manifest.models:
        for phase in phases_of(entry):
            need = _needs(task_resources(entry.resources, phase))
            if any(all(n["resources"].get(k, 0.0) >= v for k, v in need.items()) for n in nodes):
                continue
            if not any(n["resources"].get(PROFILE_RESOURCE) for n in nodes):
                raise UserInputError(
                    f"no node of the Ray cluster offers the resource {PROFILE_RESOURCE}, which keeps measurements "
                    "alone on their node: start each node with ray start … "
                    f"--resources='{{\"{PROFILE_RESOURCE}\": 1}}'")
            have = "; ".join(sorted({", ".join(f"{k} {v:g}" for k, v in sorted(n["resources"].items())
                                               if not k.startswith("node:") and k != "object_store_memory")
                                     for n in nodes}))
            wanted = ", ".join(f"{k} {v:g}" for k, v in need.items())
            raise UserInputError(f"{entry.where}: its {phase} task needs {wanted}, which no node of the Ray cluster "
                                 f"offers (nodes: {have})")


def short(node_id: str) -> str:
    return node_id[:8]


def temp_dir_note(session: RaySession) -> str | None:
    if session.temp_dir and session.keep_logs:
        return f"Ray's logs: {Path(session.temp_dir)}"
    return None
