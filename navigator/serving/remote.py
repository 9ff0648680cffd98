"""``navigator profile WS --triton --url URL``: measure a Triton server someone else runs
(Model Analyzer's ``remote`` launch mode).

Nothing on that server changes unless ``--load-configs`` says so. Without it, the model
is measured as the server has it loaded: one configuration, after checking that it is the
workspace's model (backend, batching, tensors). With it, each configuration of the search
is loaded through the model-control API with its config.pbtxt passed in the request (the
server's model files stay as they are; the server must run with ``--model-control-mode
explicit``), and at the end the model is loaded again with the config it was served with
(Triton keeps an overriding config across a plain reload) or, when it was not loaded at
the start, unloaded.

The endpoint is ``[grpc://|http://]HOST:PORT`` (gRPC when no scheme is given); the same
client calls serve both protocols (``tritonclient.grpc`` / ``tritonclient.http``).
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

from navigator.errors import UserInputError

if TYPE_CHECKING:  # pragma: no cover
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from navigator.serving.profile import ServingRun

log = logging.getLogger(__name__)

PROTOCOLS = ("grpc", "http")
LOAD_TIMEOUT_S = 600.0
CALL_TIMEOUT_S = 30.0
_URL = re.compile(r"^(?:(?P<scheme>[A-Za-z]+)://)?(?P<host>\[[0-9A-Fa-f:]+\]|[A-Za-z0-9.\-]+):(?P<port>\d{1,5})/?$")
_LOOPBACK = ("localhost", "127.0.0.1", "[::1]")


@dataclass(frozen=True)
class Endpoint:
    protocol: str            # grpc | http
    host: str
    port: int

    @property
    def address(self) -> str:
        """``HOST:PORT``: tritonclient's and perf_analyzer's ``-u`` form."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.protocol}://{self.address}"

    @property
    def same_host(self) -> bool:
        """Client and server share this machine (system shared memory can work)."""
        return self.host in _LOOPBACK


def parse_url(text: str) -> Endpoint:
    """``[grpc://|http://]HOST:PORT`` -> Endpoint; one line for anything else."""
    m = _URL.match(str(text).strip())
    if not m:
        raise UserInputError(f"--url {text!r}: expected [grpc://|http://]HOST:PORT, e.g. grpc://gpu-box:8001")
    scheme = (m.group("scheme") or "grpc").lower()
    if scheme not in PROTOCOLS:
        raise UserInputError(f"--url {text!r}: the scheme is grpc:// or http:// (TLS endpoints are not supported)")
    port = int(m.group("port"))
    if not 0 < port < 65536:
        raise UserInputError(f"--url {text!r}: port {port} is out of range")
    return Endpoint(scheme, m.group("host"), port)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300] or type(e).__name__


def to_json(cfg: ModelConfig) -> str:
    """A ModelConfig as the JSON the model-control API's ``config`` parameter takes."""
    from google.protobuf import json_format

    return str(json_format.MessageToJson(cfg, preserving_proto_field_name=True, indent=None))


def from_json(data: dict[str, Any]) -> ModelConfig:
    """The server's model config (its JSON) as a ModelConfig; fields a newer server adds are skipped."""
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2 as mc

    cfg: ModelConfig = json_format.ParseDict(data, mc.ModelConfig(), ignore_unknown_fields=True)
    return cfg


def differences(workspace_cfg: ModelConfig, served_cfg: ModelConfig) -> list[str]:
    """What makes ``served_cfg`` another model than the workspace's: backend or platform,
    batching on/off, the tensors (a different max batch size is a setting, not a model)."""
    from navigator.triton import config as cfg_mod

    out: list[str] = [d for d in cfg_mod.io_differences(workspace_cfg, served_cfg)
                      if not d.startswith("max_batch_size")]
    if bool(workspace_cfg.max_batch_size) != bool(served_cfg.max_batch_size):
        out.insert(0, f"max_batch_size {workspace_cfg.max_batch_size} -> {served_cfg.max_batch_size} "
                      "(batching on one side only)")
    return out


class RemoteServer:
    """A Triton server reached at ``endpoint``; the profile's ``r.server`` (``load``,
    ``grpc_url``, ``url``, ``metrics_url``). ``may_load``: ``--load-configs`` was given.
    A context manager: leaving it puts back what it loaded (:meth:`restore`)."""

    metrics_url = None      # the remote's GPU memory is not read (nvidia-smi here is another machine's)

    def __init__(self, endpoint: Endpoint, scratch: Path, *, may_load: bool):
        self.endpoint = endpoint
        self.scratch = Path(scratch)
        self.may_load = bool(may_load)
        self.changed: list[str] = []       # models whose config this run loaded
        # model -> its config as served at the start (None: not loaded)
        self.original: dict[str, dict[str, Any] | None] = {}
        self.restored: bool | None = None  # None: nothing to restore
        self.restore_error: str | None = None
        self.version: str | None = None       # the server's, from its metadata
        self._client: Any = None          # tritonclient's grpc or http InferenceServerClient

    # ------------------------------------------------------------------ addresses
    @property
    def url(self) -> str:
        return self.endpoint.address

    @property
    def protocol(self) -> str:
        return self.endpoint.protocol

    @property
    def grpc_url(self) -> str:
        if self.protocol != "grpc":
            raise UserInputError(f"--url {self.endpoint.url}: navigator's load generator speaks gRPC",
                                 hint="give the server's gRPC port (grpc://HOST:8001) or measure with perf_analyzer")
        return self.endpoint.address

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "RemoteServer":
        self._connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None

    def _connect(self) -> None:
        if self.protocol == "grpc":
            import tritonclient.grpc as tc

            self._client = tc.InferenceServerClient(self.endpoint.address)
        else:
            import tritonclient.http as tc

            self._client = tc.InferenceServerClient(self.endpoint.address, connection_timeout=CALL_TIMEOUT_S,
                                                    network_timeout=LOAD_TIMEOUT_S)
        try:
            live = self._call(self._client.is_server_live)
        except UserInputError as e:
            raise UserInputError(f"no Triton server answers at {self.endpoint.url}: {e.message}",
                                 hint="check the host and port (gRPC is 8001 and HTTP 8000 by default)") from None
        if not live:
            raise UserInputError(f"the Triton server at {self.endpoint.url} is not live")
        with contextlib.suppress(UserInputError):
            meta = (self._call(self._client.get_server_metadata, as_json=True) if self.protocol == "grpc"
                    else self._call(self._client.get_server_metadata))
            self.version = str(meta.get("version")) if meta.get("version") else None

    def _call(self, fn: Callable[..., Any], *args: Any, timeout: float = CALL_TIMEOUT_S,
              **kwargs: Any) -> Any:
        if self.protocol == "grpc":
            kwargs["client_timeout"] = timeout
        try:
            return fn(*args, **kwargs)
        except Exception as e:     # InferenceServerException, connection errors of either client
            raise UserInputError(_one_line(e)) from None

    # ------------------------------------------------------------------ the model there
    def served_config(self, model: str) -> ModelConfig | None:
        """The config of ``model`` as the server has it loaded; None when it is not ready."""
        try:
            ready = self._call(self._client.is_model_ready, model)
        except UserInputError:
            ready = False
        if not ready:
            self.original.setdefault(model, None)
            return None
        if self.protocol == "grpc":
            data = self._call(self._client.get_model_config, model, as_json=True)
            data = data.get("config", data)
        else:
            data = self._call(self._client.get_model_config, model)
        self.original.setdefault(model, data)
        return from_json(data)

    def load(self, name: str) -> None:
        """Serve the scratch repository's ``name/config.pbtxt`` there (``--load-configs``); without
        the flag nothing is loaded: the model is measured as it is served."""
        if not self.may_load:
            return
        from navigator.triton import config as cfg_mod

        cfg = cfg_mod.read(self.scratch / name / "config.pbtxt")
        if name not in self.changed:
            self.changed.append(name)
        try:
            self._call(self._client.load_model, name, config=to_json(cfg), timeout=LOAD_TIMEOUT_S)
        except UserInputError as e:
            raise UserInputError(f"model {name!r} failed to load at {self.endpoint.url}: {e.message}",
                                 hint="the server must run with --model-control-mode explicit, and its model "
                                      "folder must hold the workspace's model file") from None

    def restore(self) -> None:
        """Put back what this run loaded: the config each model was served with at the start
        (passed in the load request: a plain reload would keep the last override), or unloaded
        when it was not loaded then."""
        import json

        if not self.changed or self._client is None or self.restored is not None:
            return
        try:
            for name in self.changed:
                before = self.original.get(name)
                if before is None:
                    self._call(self._client.unload_model, name, timeout=LOAD_TIMEOUT_S)
                else:
                    self._call(self._client.load_model, name, config=json.dumps(before), timeout=LOAD_TIMEOUT_S)
            self.restored = True
        except UserInputError as e:
            self.restored = False
            self.restore_error = e.message
            log.warning("could not put back %s at %s: %s", ", ".join(self.changed),
                        self.endpoint.url, e.message)


def check_served(r: ServingRun, reporter: Any) -> None:
    """--url: the model there is the workspace's. Without --load-configs it is measured as served
    (one configuration, its own settings); with it, each configuration is loaded there."""
    from navigator.serving import variants
    from navigator.serving.search import Space

    server = cast(RemoteServer, r.server)
    where = server.endpoint.url
    served = server.served_config(r.model)
    if served is None:
        if not r.opts.load_configs:
            raise UserInputError(f"model {r.model!r} is not loaded at {where}",
                                 hint="load it there, or pass --load-configs to load the workspace's config "
                                      "through the model-control API")
        reporter.info(f"{r.model} is not loaded at {where}: loading the workspace's config there")
        return
    diffs = differences(r.base, served)
    if diffs and not r.opts.load_configs:
        raise UserInputError(f"the model {r.model!r} at {where} is not the workspace's {r.key} ({diffs[0]})",
                             hint="serve the workspace's model there, or pass --load-configs to load its config "
                                  "(the model file there must match)")
    if r.opts.load_configs:
        return
    r.base = r.served = served
    r.preferred = variants.preferred_sizes(served)
    groups = list(served.instance_group)
    count = groups[0].count if groups else 1
    delay = (served.dynamic_batching.max_queue_delay_microseconds
             if served.HasField("dynamic_batching") and served.max_batch_size else None)
    r.space = Space((max(1, count),), (served.max_batch_size,), (delay,))
    reporter.info(f"measuring {r.model} as served at {where} ({r.space.all()[0].name}); nothing there is changed")
