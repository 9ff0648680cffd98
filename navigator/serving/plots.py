"""PNG plots of a serving profile (matplotlib, Agg backend, imported here only).

- ``throughput_v_latency.png``: throughput against p99 latency, one line per
  configuration over its concurrency sweep (Model Analyzer's throughput_v_latency);
  the chosen one drawn thick, the p99 constraint as a vertical line.
- ``latency_v_concurrency.png``: p50/p90/p95/p99 latency against concurrency of the
  chosen (else the top-ranked) configuration.
- ``gpu_mem_v_latency.png``: only when a GPU was there and its memory was read.
"""

from __future__ import annotations

from pathlib import Path

MAX_LINES = 10


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _finish(plt, fig, ax, path: Path, xlabel: str, ylabel: str, title: str, *, legend: int | None) -> Path:
    """Labels, grid, the legend at font size ``legend`` (None: no legend); save and close."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    if legend is not None:
        ax.legend(fontsize=legend)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def throughput_v_latency(path: Path, configs: list[dict], *, chosen: str | None, max_p99_ms: float | None,
                         title: str) -> Path:
    """``configs``: status-like dicts {name, results: [{concurrency, throughput, latency_ms}]}, ranked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    shown = [c for c in configs if c.get("results")][:MAX_LINES]
    if chosen and not any(c["name"] == chosen for c in shown):
        shown += [c for c in configs if c["name"] == chosen]
    for c in shown:
        pts = sorted(c["results"], key=lambda r: (r["batch_size"], r.get("concurrency") or 0,
                                                  r.get("request_rate") or 0))
        xs = [r["latency_ms"].get("p99") for r in pts]
        ys = [r["throughput"] for r in pts]
        bold = c["name"] == chosen
        ax.plot(xs, ys, marker="o", linewidth=3 if bold else 1.2, label=c["name"] + (" (chosen)" if bold else ""))
        for r, x, y in zip(pts, xs, ys):
            label = f"{r['request_rate']:g}/s" if r.get("request_rate") is not None else str(r["concurrency"])
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7)
    if max_p99_ms is not None:
        ax.axvline(max_p99_ms, color="red", linestyle="--", linewidth=1, label=f"max p99 {max_p99_ms:g} ms")
    return _finish(plt, fig, ax, path, "p99 latency (ms)", "throughput (inferences/s)", title,
                   legend=7 if shown else None)


def latency_v_concurrency(path: Path, config: dict, *, title: str, open_loop: bool = False) -> Path:
    """Latency percentiles against the load: concurrency, or the offered request rate (open loop)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    key = "request_rate" if open_loop else "concurrency"
    pts = sorted(config.get("results") or [], key=lambda r: (r["batch_size"], r.get(key) or 0))
    batch_sizes = sorted({r["batch_size"] for r in pts})
    for b in batch_sizes:
        row = [r for r in pts if r["batch_size"] == b]
        xs = [r.get(key) or 0 for r in row]
        for q, style in (("p50", "-"), ("p90", "--"), ("p95", "-."), ("p99", ":")):
            suffix = f" (batch {b})" if len(batch_sizes) > 1 else ""
            ax.plot(xs, [r["latency_ms"].get(q) for r in row], style, marker="o", label=q + suffix)
    ax.set_xscale("log", base=2)
    xlabel = "offered request rate (requests/s, open loop)" if open_loop else "concurrency (requests in flight)"
    return _finish(plt, fig, ax, path, xlabel, "latency (ms)", title, legend=8 if pts else None)


def gpu_mem_v_latency(path: Path, points: list[tuple[str, float, float]], *, title: str) -> Path:
    """``points``: (configuration, p99 ms, GPU memory MB)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    for name, p99, mem in points:
        ax.scatter([p99], [mem], label=name)
    return _finish(plt, fig, ax, path, "p99 latency (ms)", "GPU memory used (MB)", title,
                   legend=7 if points else None)
