"""The real ``perf_analyzer`` (tritonclient 2.51's binary, ``ServerEnv.perf_analyzer``,
run with ``ServerEnv.env``): command lines, one run per measurement point, its ``-f``
CSV read back into the common :class:`~navigator.serving.measure.Measurement`.

Flags used (all documented Perf Analyzer options): ``-m``, ``-u``, ``-i grpc|http``,
``-b``, ``--concurrency-range C:C`` (closed loop) or ``--request-rate-range R:R`` /
``--request-intervals FILE`` (open loop), ``--shared-memory system`` with
``--output-shared-memory-size``, ``--measurement-interval MS`` (time windows),
``--stability-percentage 10``, ``--max-trials 10`` (its defaults, stated),
``--input-data perf_input.json``, ``--shape NAME:dims`` per dynamic input, ``-f
out.csv`` (latencies in µs). An unstable measurement is reported by Perf Analyzer on
its output ("Failed to obtain stable measurement", exit 2, no CSV); the point is then
measured again over 3 windows with the bound lifted and recorded with ``stable: false``.
"""

from __future__ import annotations

import csv
import re
import shlex
import subprocess
from pathlib import Path

from navigator.errors import UserInputError
from navigator.serving.measure import LAST, MAX_WINDOWS, STABILITY, Measurement

_UNSTABLE = re.compile(r"failed to obtain stable measurement", re.I)
_PASS = re.compile(r"^\s*Pass \[(\d+)\]", re.M)
_CLIENT_AVG = re.compile(r"Client:.*?Avg latency: (\d+(?:\.\d+)?) usec", re.S)
_REQUESTS = re.compile(r"Client:\s*\n\s*Request count: (\d+)")


def load_flags(*, concurrency: int = 1, request_rate: float | None = None, intervals_file: str | Path | None = None,
               shared_memory: str = "none", output_bytes: int | None = None) -> list[str]:
    """The flags of one point's load: closed loop at ``concurrency``, or open loop at
    ``request_rate`` / the gaps of ``intervals_file``; system shared memory sized for the outputs."""
    if intervals_file is not None:
        flags = ["--request-intervals", str(intervals_file)]
    elif request_rate is not None:
        flags = ["--request-rate-range", f"{request_rate:g}:{request_rate:g}"]
    else:
        flags = ["--concurrency-range", f"{concurrency}:{concurrency}"]
    if shared_memory != "none":
        flags += ["--shared-memory", shared_memory]
        if output_bytes:
            flags += ["--output-shared-memory-size", str(int(output_bytes))]
    return flags


def command(binary: str | Path, *, model: str, url: str, input_data: str | Path, shapes: list[str],
            load: list[str], batch_size: int = 1, window_ms: int = 5000, csv_path: str | Path | None = None,
            verbose: bool = True, max_windows: int = MAX_WINDOWS, protocol: str = "grpc") -> list[str]:
    """``load``: :func:`load_flags`."""
    cmd = [str(binary), "-m", model, "-u", url, "-i", protocol, "-b", str(batch_size),
           *load, "--measurement-mode", "time_windows",
           "--measurement-interval", str(int(window_ms)),
           "--stability-percentage", str(round((STABILITY - 1) * 100)), "--max-trials", str(max_windows),
           "--input-data", str(input_data)]
    for s in shapes:
        cmd += ["--shape", s]
    if csv_path is not None:
        cmd += ["-f", str(csv_path)]
    if verbose:
        cmd.append("-v")
    return cmd


def shell_line(cmd: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)


def parse_csv(text: str, *, batch_size: int) -> list[dict]:
    """Rows of Perf Analyzer's ``-f`` CSV as {concurrency, throughput, latency_ms{…}}; an open-loop
    run's first column is its request rate (concurrency 0 then)."""
    rows = []
    reader = csv.DictReader(line for line in text.splitlines() if line.strip())
    for row in reader:
        try:
            conc = int(float(row["Concurrency"])) if "Concurrency" in row else 0
            thr = float(row["Inferences/Second"])
        except (KeyError, ValueError):
            continue
        lat = {}
        for key, col in (("avg", "Avg latency"), ("p50", "p50 latency"), ("p90", "p90 latency"),
                         ("p95", "p95 latency"), ("p99", "p99 latency")):
            if row.get(col) not in (None, ""):
                lat[key] = round(float(row[col]) / 1000.0, 4)
        rows.append({"concurrency": conc, "batch_size": batch_size, "throughput": thr, "latency_ms": lat})
    return rows


def _run(cmd: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise UserInputError(f"perf_analyzer did not finish in {timeout:.0f} s ({shell_line(cmd)})") from None


def measure(binary: Path, env: dict, *, model: str, url: str, input_data: Path, shapes: list[str],
            concurrency: int, batch_size: int, window_ms: int, workdir: Path, tag: str = "",
            max_windows: int = MAX_WINDOWS, protocol: str = "grpc", request_rate: float | None = None,
            intervals: tuple[float, Path] | None = None, shared_memory: str = "none",
            output_bytes: int | None = None) -> tuple[Measurement, str]:
    """One point; returns the measurement and the exact command line.

    Perf Analyzer writes no CSV when it gives up on stability (exit 2, "Failed to
    obtain stable measurement"), so its percentiles would be lost: the point is then
    measured once more over 3 windows with the stability bound lifted, and recorded
    from that run with ``stable: false`` and the windows of the first attempt.
    ``max_windows`` (3…10) lowers ``--max-trials`` when the time budget is short. Open loop:
    ``request_rate``, or ``intervals`` (the mean rate, the file of gaps)."""
    workdir.mkdir(parents=True, exist_ok=True)
    rate = intervals[0] if intervals is not None else request_rate
    stem = f"{tag or model}_b{batch_size}_" + (f"r{rate:g}" if rate is not None else f"c{concurrency}")
    out_csv = workdir / f"{stem}.csv"
    if out_csv.exists():
        out_csv.unlink()
    load = load_flags(concurrency=concurrency, request_rate=request_rate,
                      intervals_file=intervals[1] if intervals is not None else None, shared_memory=shared_memory,
                      output_bytes=output_bytes)
    cmd = command(binary, model=model, url=url, input_data=input_data, shapes=shapes, load=load,
                  batch_size=batch_size, window_ms=window_ms,
                  csv_path=out_csv, max_windows=max(LAST, min(MAX_WINDOWS, max_windows)), protocol=protocol)
    timeout = MAX_WINDOWS * window_ms / 1000.0 * 2 + 60
    r = _run(cmd, env, timeout)
    text = r.stdout + r.stderr
    log_text = shell_line(cmd) + "\n\n" + text
    passes = [int(x) for x in _PASS.findall(text)]
    unstable = bool(_UNSTABLE.search(text))
    if unstable and not out_csv.is_file():
        retry = list(cmd)
        i = retry.index("--stability-percentage")
        retry[i + 1] = "1000"
        j = retry.index("--max-trials")
        retry[j + 1] = str(LAST)
        r = _run(retry, env, timeout)
        text = r.stdout + r.stderr
        log_text += "\n\n# unstable: measured again over 3 windows, recorded with stable: false\n" + \
            shell_line(retry) + "\n\n" + text
    (workdir / f"{stem}.log").write_text(log_text)
    rows = parse_csv(out_csv.read_text(), batch_size=batch_size) if out_csv.is_file() else []
    if not rows:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        errs = [ln for ln in lines if "error" in ln.lower() or "failed" in ln.lower()] or lines[-1:]
        where = f"{rate:g} requests/s" if rate is not None else f"concurrency {concurrency}"
        raise UserInputError(f"perf_analyzer gave no result for {model} at {where}"
                             f" (exit {r.returncode}): {errs[-1][:300] if errs else 'no output'}")
    row = rows[-1]
    lat = dict(row["latency_ms"])
    avg = _CLIENT_AVG.search(text)
    if avg and "avg" not in lat:
        lat = {"avg": round(float(avg.group(1)) / 1000.0, 4), **lat}
    count = _REQUESTS.search(text)
    windows = max(passes) if passes else (MAX_WINDOWS if unstable else LAST)
    m = Measurement(concurrency=0 if rate is not None else concurrency, batch_size=batch_size,
                    throughput=row["throughput"], latency_ms=lat, windows=windows, stable=not unstable,
                    requests=int(count.group(1)) if count else None, request_rate=rate)
    return m, shell_line(cmd)
