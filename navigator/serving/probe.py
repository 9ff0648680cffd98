"""Direct calls to the server a serving profile measures, besides the load: where it is, a client
in its protocol, the check that a model answers one input with the same bytes twice (before a
response cache is searched), the cache's hits from Triton's statistics, and the bytes of one
response (perf_analyzer's shared-memory output region)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover
    from navigator.serving.profile import ServingRun
    from navigator.serving.search import Candidate


def protocol(r: ServingRun) -> str:
    """The measured server's protocol: grpc, or http for an http:// --url."""
    return getattr(r.server, "protocol", "grpc")


def address(r: ServingRun) -> str:
    """``HOST:PORT`` of the measured server (perf_analyzer's ``-u``)."""
    return r.server.url if r.opts.url else r.server.grpc_url


def client(r: ServingRun) -> tuple[Any, Any]:
    """A synchronous client of the measured server, in its protocol."""
    if protocol(r) == "http":
        import tritonclient.http as tc

        return tc.InferenceServerClient(address(r), network_timeout=60.0), tc
    import tritonclient.grpc as tc

    return tc.InferenceServerClient(r.server.grpc_url), tc


def determinism(r: ServingRun, cand: Candidate, load: Callable[[str], None]) -> str | None:
    """Before a response cache is measured: the model, served with the cache off, answers two
    inputs twice each with the same bytes (else a cached answer could differ from a computed one).
    None when it does, else why not."""
    import dataclasses

    import numpy as np

    from navigator.serving import variants
    from navigator.serving.loadgen import request_inputs

    off = dataclasses.replace(cand, cache=False)
    variants.write(r.scratch / r.step / "config.pbtxt", variants.variant(r.base, off, preferred=r.preferred))
    load(r.model)
    client_, tc = client(r)
    try:
        for inputs in request_inputs(r.data, 1, tc, count=min(2, len(r.data.rows))):
            first, second = (client_.infer(r.model, inputs) for _ in range(2))
            for name in r.data.outputs:
                a, b = first.as_numpy(name), second.as_numpy(name)
                if a.shape != b.shape or a.tobytes() != b.tobytes():
                    diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) \
                        if a.shape == b.shape and a.dtype.kind in "fiu" else None
                    return (f"not searched: {r.model} is not deterministic (output {name} differs between two "
                            f"runs of one input" + (f" by up to {diff:.3g}" if diff is not None else "") + ")")
    except Exception as e:      # the server's error: the cache cannot be judged, so it is not searched
        return f"not searched: the determinism check failed ({' '.join(str(e).split())[:200]})"
    finally:
        client_.close()
    return None


def cache_hits(r: ServingRun) -> tuple[int, int]:
    """(response-cache hits, requests) in the model's statistics since it was last loaded."""
    client_, _ = client(r)
    try:
        if protocol(r) == "http":
            data = client_.get_inference_statistics(r.step)
        else:
            data = client_.get_inference_statistics(r.step, as_json=True)
    except Exception:
        return 0, 0
    finally:
        client_.close()
    hits = total = 0
    for m in data.get("model_stats", []):
        stats = m.get("inference_stats", {})
        hits += int((stats.get("cache_hit") or {}).get("count", 0))
        total += int((stats.get("success") or {}).get("count", 0))
    return hits, total


def output_bytes(r: ServingRun, batch_size: int) -> int | None:
    """Bytes of one response's outputs from the config's dims (perf_analyzer's shared-memory
    output region); None when a dim is dynamic or an output holds strings (its default then)."""
    import numpy as np
    from tritonclient.grpc import model_config_pb2 as mc

    from navigator.triton import config as cfg_mod

    total = 0
    for out in r.served.output:
        dims = list(out.dims)
        if any(d < 0 for d in dims) or out.data_type == mc.TYPE_STRING:
            return None
        item = np.dtype(cfg_mod.numpy_dtype(mc.DataType.Name(out.data_type))).itemsize
        total += int(np.prod(dims or [1])) * item * (batch_size if r.served.max_batch_size else 1)
    return total or None
