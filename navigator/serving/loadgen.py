"""Our own load generator, used where the real ``perf_analyzer`` is not there (or
``--perf-analyzer off``): ``tritonclient.grpc.aio``, the latency of every request from
send to response, windows cut by time, Perf Analyzer's stability rule
(:mod:`navigator.serving.measure`). Perf Analyzer's load modes:

- closed loop: ``concurrency`` requests in flight at all times (each coroutine sends its
  next request when the previous one returns);
- open loop: a request every ``1 / rate`` seconds, or at the gaps of ``intervals_us``
  (cycled), whether or not earlier ones have returned (at most ``MAX_IN_FLIGHT``; a send
  skipped past that counts as an error);
- ``shared_memory="system"``: the inputs of every request in one system shared-memory
  region registered with the server, the outputs written into another (their contents
  are not read: only the transfer is measured); the server must share this host.

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
UNREGISTER_WAIT_S = 10.0   # how long a region the server still uses may delay its unregistering
MAX_IN_FLIGHT = 1024        # open loop: sends past this many unanswered requests are skipped (errors)
_SEQUENCE_IDS = itertools.count(1)


def measure(url: str, model: str, data: RequestData, *, concurrency: int = 1, batch_size: int = 1,
            window_ms: int = 2000, max_windows: int = MAX_WINDOWS, deadline: float | None = None,
            rate: float | None = None, intervals_us: tuple[int, ...] = (),
            shared_memory: str = "none") -> Measurement:
    """One measurement point against the gRPC endpoint ``url`` ("127.0.0.1:PORT"): closed loop
    at ``concurrency``, or open loop at ``rate`` requests/s or the gaps of ``intervals_us``.
    ``deadline`` (``time.monotonic()``): no new window starts after it (``stable: false``)."""
    if (rate is not None or intervals_us) and data.sequence_length:
        raise UserInputError(f"model {model!r} is stateful: its sequences are measured at a concurrency, not at a "
                             "request rate")
    if shared_memory != "none" and data.sequence_length:
        raise UserInputError(f"model {model!r} is stateful: its sequences are sent over the network, not through "
                             "shared memory")
    gaps = [g / 1e6 for g in intervals_us] if intervals_us else ([1.0 / rate] if rate is not None else [])
    return asyncio.run(_measure(url, model, data, concurrency, batch_size, window_ms / 1000.0, max_windows,
                                deadline, gaps, rate, shared_memory))


def request_inputs(data: RequestData, batch_size: int, client_module=None, count: int | None = None) -> list[list]:
    """The inputs of each request the load cycles through (every step of a sequence; else at most
    16, or ``count``), as ``client_module``'s InferInput (tritonclient.grpc by default, or .http)."""
    from navigator.triton import config as cfg_mod

    if client_module is None:
        import tritonclient.grpc as client_module

    out = []
    n = count if count is not None else len(data.rows) if data.sequence_length else min(len(data.rows), 16)
    for k in range(n):
        arrays = data.batch(k, batch_size)
        request = []
        for name in data.names:
            arr = arrays[name]
            inp = client_module.InferInput(name, list(arr.shape),
                                           cfg_mod.triton_dtype(str(arr.dtype))[len("TYPE_"):])
            inp.set_data_from_numpy(arr)
            request.append(inp)
        out.append(request)
    return out


class _SystemShm:
    """The requests' inputs in one system shared-memory region and their outputs in another,
    both registered with the server; :meth:`close` unregisters and removes them."""

    def __init__(self, client, tag: str):
        self.client, self.tag = client, tag
        self.handles: list = []
        self.names: list[str] = []

    async def region(self, name: str, size: int):
        import tritonclient.utils.shared_memory as shm

        key = f"/{self.tag}_{name}"
        handle = shm.create_shared_memory_region(f"{self.tag}_{name}", key, max(1, size))
        self.handles.append(handle)
        await self.client.register_system_shared_memory(f"{self.tag}_{name}", key, max(1, size))
        self.names.append(f"{self.tag}_{name}")
        return handle, f"{self.tag}_{name}"

    async def close(self) -> None:
        import tritonclient.utils.shared_memory as shm

        for name in self.names:
            deadline = time.monotonic() + UNREGISTER_WAIT_S
            while True:
                try:
                    await self.client.unregister_system_shared_memory(name)
                    break
                except Exception as e:
                    # a request the server still holds keeps the region "in use" a moment after its
                    # reply; any other error (the server gone) leaves it: the local region goes anyway
                    if "in use" not in str(e) or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.05)
        for handle in self.handles:
            try:
                shm.destroy_shared_memory_region(handle)
            except Exception:
                pass


async def _into_shm(client, model, data, batch_size, requests, outputs, shm: _SystemShm):
    """Requests whose inputs and outputs live in shared memory; one plain request first gives
    the outputs' sizes."""
    import numpy as np
    from tritonclient.grpc import InferInput, InferRequestedOutput

    first = await client.infer(model, requests[0], outputs=outputs, client_timeout=CLIENT_TIMEOUT_S)
    out_bytes = {n: first.as_numpy(n).nbytes for n in data.outputs}
    arrays = [data.batch(k, batch_size) for k in range(len(requests))]
    total = sum(np.ascontiguousarray(a[n]).nbytes for a in arrays for n in data.names)
    handle, in_region = await shm.region("in", total)
    _, out_region = await shm.region("out", 2 * sum(out_bytes.values()))   # outputs' sizes may vary a little
    import tritonclient.utils.shared_memory as shm_mod

    offset, moved = 0, []
    for k, arrs in enumerate(arrays):
        request = []
        for inp, name in zip(requests[k], data.names):
            arr = np.ascontiguousarray(arrs[name])
            shm_mod.set_shared_memory_region(handle, [arr], offset=offset)
            new = InferInput(name, inp.shape(), inp.datatype())
            new.set_shared_memory(in_region, arr.nbytes, offset=offset)
            offset += arr.nbytes
            request.append(new)
        moved.append(request)
    outs, at = [], 0
    for n in data.outputs:
        o = InferRequestedOutput(n)
        o.set_shared_memory(out_region, 2 * out_bytes[n], offset=at)
        at += 2 * out_bytes[n]
        outs.append(o)
    return moved, outs


async def _measure(url, model, data, concurrency, batch_size, window_s, max_windows, deadline, gaps, rate,
                   shared_memory) -> Measurement:
    import os
    import uuid

    from tritonclient.grpc import InferRequestedOutput
    from tritonclient.grpc.aio import InferenceServerClient

    requests = request_inputs(data, batch_size)
    outputs = [InferRequestedOutput(n) for n in data.outputs]
    completions: list[tuple[float, float]] = []
    errors: list[tuple[float, str]] = []
    stop = asyncio.Event()
    client = InferenceServerClient(url)
    shm = _SystemShm(client, f"navload_{os.getpid()}_{uuid.uuid4().hex[:8]}") if shared_memory == "system" else None
    if shm is not None:
        try:
            requests, outputs = await _into_shm(client, model, data, batch_size, requests, outputs, shm)
        except BaseException as e:
            await shm.close()
            await client.close()
            if isinstance(e, Exception):
                raise UserInputError(f"model {model!r}: system shared memory: {' '.join(str(e).split())[:300]}",
                                     hint="the server must run on this host") from None
            raise

    steps = data.sequence_length

    async def send(k: int) -> None:
        t0 = time.perf_counter()
        try:
            await client.infer(model, requests[k % len(requests)], outputs=outputs, client_timeout=CLIENT_TIMEOUT_S)
        except Exception as e:
            errors.append((time.perf_counter(), " ".join(str(e).split())))
            return
        completions.append((t0, time.perf_counter()))

    async def sender() -> None:
        """Open loop: sends on the clock, never waiting for a response."""
        pending: set = set()
        k, t_next = 0, time.perf_counter()
        while not stop.is_set():
            delay = t_next - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if len(pending) < MAX_IN_FLIGHT:
                task = asyncio.create_task(send(k))
                pending.add(task)
                task.add_done_callback(pending.discard)
            else:
                errors.append((time.perf_counter(), f"more than {MAX_IN_FLIGHT} requests unanswered"))
            t_next += gaps[k % len(gaps)]
            k += 1
        if pending:
            await asyncio.wait(pending, timeout=CLIENT_TIMEOUT_S)

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

    tasks = ([asyncio.create_task(sender())] if gaps else
             [asyncio.create_task(worker(w)) for w in range(concurrency)])
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
        if shm is not None:
            await shm.close()
        await client.close()
    where = f"{rate:g} requests/s" if rate is not None else ("its request intervals" if gaps else
                                                              f"concurrency {concurrency}")
    if not any(w.requests for w in windows):
        reason = errors[0][1] if errors else "no request completed"
        raise UserInputError(f"model {model!r} at {where}: {reason[:300]}")
    m = summarize(windows, concurrency=0 if gaps else concurrency, batch_size=batch_size)
    if gaps:
        m.request_rate = rate if rate is not None else round(len(gaps) / sum(gaps), 3)
    return m
