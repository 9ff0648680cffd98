"""Our own load generator, used where the real ``perf_analyzer`` is not there (or
``--perf-analyzer off``): ``tritonclient.grpc.aio``, ``concurrency`` requests in
flight at all times (each coroutine sends its next request when the previous one
returns, Perf Analyzer's concurrency mode), the latency of every request from send
to response, windows cut by time, Perf Analyzer's stability rule
(:mod:`navigator.serving.measure`).

A short warm-up (half a window, at least 0.2 s) runs before the first window; its
requests are not counted. Requests that fail are counted as errors; if none
succeeds the measurement raises with the server's message.
"""

from __future__ import annotations

import asyncio
import itertools
import time

from navigator.errors import UserInputError
from navigator.serving.inputs import RequestData
from navigator.serving.measure import MAX_WINDOWS, Measurement, Window, done, summarize

CLIENT_TIMEOUT_S = 60.0
_SEQUENCE_IDS = itertools.count(1)


def measure(url: str, model: str, data: RequestData, *, concurrency: int, batch_size: int = 1,
            window_ms: int = 2000, max_windows: int = MAX_WINDOWS, deadline: float | None = None) -> Measurement:
    """One measurement point against the gRPC endpoint ``url`` ("127.0.0.1:PORT").
    ``deadline`` (``time.monotonic()``): no new window starts after it (``stable: false``)."""
    return asyncio.run(_measure(url, model, data, concurrency, batch_size, window_ms / 1000.0, max_windows,
                                deadline))


def _inputs(data: RequestData, batch_size: int) -> list[list]:
    from tritonclient.grpc import InferInput

    from navigator.triton import config as cfg_mod

    out = []
    for k in range(len(data.rows) if data.sequence_length else min(len(data.rows), 16)):
        arrays = data.batch(k, batch_size)
        request = []
        for name in data.names:
            arr = arrays[name]
            inp = InferInput(name, list(arr.shape), cfg_mod.triton_dtype(str(arr.dtype))[len("TYPE_"):])
            inp.set_data_from_numpy(arr)
            request.append(inp)
        out.append(request)
    return out


async def _measure(url, model, data, concurrency, batch_size, window_s, max_windows, deadline) -> Measurement:
    from tritonclient.grpc import InferRequestedOutput
    from tritonclient.grpc.aio import InferenceServerClient

    requests = _inputs(data, batch_size)
    outputs = [InferRequestedOutput(n) for n in data.outputs]
    completions: list[tuple[float, float]] = []
    errors: list[tuple[float, str]] = []
    stop = asyncio.Event()
    client = InferenceServerClient(url)

    steps = data.sequence_length

    async def worker(wid: int) -> None:
        i = wid
        sequence_id = 0
        while not stop.is_set():
            seq = {}
            if steps:   # each worker streams whole sequences, its steps in order, under its own ids
                k = (i // concurrency) % steps
                if k == 0:   # ids never reused: an unfinished sequence of an earlier point may linger
                    sequence_id = next(_SEQUENCE_IDS)
                seq = {"sequence_id": sequence_id, "sequence_start": k == 0,
                       "sequence_end": k == steps - 1}
                inputs = requests[k % len(requests)]
            else:
                inputs = requests[i % len(requests)]
            i += concurrency
            t0 = time.perf_counter()
            try:
                await client.infer(model, inputs, outputs=outputs, client_timeout=CLIENT_TIMEOUT_S, **seq)
            except Exception as e:    # InferenceServerException, grpc errors: counted, the first one reported
                errors.append((time.perf_counter(), " ".join(str(e).split())))
                if len(errors) > 1000:
                    return
                await asyncio.sleep(0.001)
                continue
            completions.append((t0, time.perf_counter()))

    tasks = [asyncio.create_task(worker(w)) for w in range(concurrency)]
    windows: list[Window] = []
    try:
        await asyncio.sleep(max(0.2, window_s / 2))
        start = time.perf_counter()
        done_idx = next((k for k, (_, t1) in enumerate(completions) if t1 >= start), len(completions))
        err_idx = next((k for k, (t, _) in enumerate(errors) if t >= start), len(errors))
        while True:
            await asyncio.sleep(max(0.0, start + window_s - time.perf_counter()))
            end = time.perf_counter()
            n_done, n_err = len(completions), len(errors)
            w = Window(duration_s=end - start, latencies_s=[t1 - t0 for t0, t1 in completions[done_idx:n_done]],
                       errors=n_err - err_idx)
            windows.append(w)
            done_idx, err_idx, start = n_done, n_err, end
            if done(windows, max_windows=max_windows):
                break
            if deadline is not None and time.monotonic() >= deadline and len(windows) >= 1:
                break
            if len(errors) > 1000 or all(t.done() for t in tasks):
                break
    finally:
        stop.set()
        try:
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=CLIENT_TIMEOUT_S)
        except asyncio.TimeoutError:
            for t in tasks:
                t.cancel()
        await client.close()
    if not any(w.requests for w in windows):
        reason = errors[0][1] if errors else "no request completed"
        raise UserInputError(f"model {model!r} at concurrency {concurrency}: {reason[:300]}")
    return summarize(windows, concurrency=concurrency, batch_size=batch_size)
