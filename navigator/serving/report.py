"""``WS/report/summary.md`` (and ``summary.html``): the workspace in one page.

Sections: the model and samples; the conversion table (format, runner, convert,
verify, in-process profile peak) and the best format, from status.yaml; then, when
``navigator profile --triton`` ran, the serving profile: provenance (machine,
cores, backend, stand-in or not, tool, date), the ranked table, the chosen
config.pbtxt, what was skipped, the plots and the hand-off files.

One list of blocks is rendered twice: Markdown (images linked relative to the
report) and HTML (one self-contained file, images embedded as base64).
"""

from __future__ import annotations

import base64
import html
import os
from pathlib import Path

from navigator.errors import UserInputError

# blocks: ("h", level, text) | ("p", text) | ("table", header, rows) | ("img", path, alt) | ("code", text)


def blocks(ws, st) -> list[tuple]:
    out: list[tuple] = [("h", 1, f"Navigator report: {st.model.name}")]
    out.append(("p", f"Workspace `{ws.root}` - state {st.state}, navigator {st.navigator_version}, "
                     f"updated {st.updated}. Source {st.model.source_format} `{st.model.path or '-'}`."))
    sig = st.signature
    if sig.inputs or sig.outputs:
        out.append(("table", ["tensor", "kind", "dtype", "shape"],
                    [[t.name, "input", t.dtype, str(t.shape)] for t in sig.inputs] +
                    [[t.name, "output", t.dtype, str(t.shape)] for t in sig.outputs]))
    out.append(("h", 2, "Conversion, verification, profile"))
    rows = []
    for key, fs in st.formats.items():
        if not fs.runners:
            rows.append([key, fs.precision, "-", fs.convert.status, "-", "-", "-", fs.convert.reason or ""])
            continue
        for rkey, rs in fs.runners.items():
            peak = rs.profile.peak() if rs.profile.status == "ok" else None
            rows.append([key, fs.precision, rkey, fs.convert.status, rs.verify.status, rs.profile.status,
                         f"{peak.throughput:.1f}/s @ {peak.batch_size}, p99 {peak.latency_ms.get('p99', 0):.3f} ms"
                         if peak else "-",
                         rs.verify.reason or rs.profile.reason or fs.convert.reason or ""])
    out.append(("table", ["format", "precision", "runner", "convert", "verify", "profile", "peak", "reason"], rows))
    if st.best:
        b = st.best
        extra = f", {b.throughput:.1f}/s at batch {b.batch_size}" if b.throughput is not None else ""
        lead = b.lead() if b.separated else None
        sure = f" Not a sure pick: {b.note}." if b.note else f" {lead[0].upper()}{lead[1:]}." if lead else ""
        out.append(("p", f"Best: **{b.key}** on {b.runner}{extra} (basis: {b.basis}).{sure}"))
    else:
        out.append(("p", "Best: none (no format was verified)."))
    sv = getattr(st, "serving", None)
    if sv is None:
        out.append(("h", 2, "Serving profile"))
        out.append(("p", "Not run. `navigator profile WS --triton` measures the model served by Triton."))
        return out
    try:
        out += serving_blocks(ws, sv)
    except (KeyError, TypeError, ValueError, AttributeError) as e:   # a hand-edited `serving:` record
        raise UserInputError(f"{ws.status_path}: malformed serving record ({type(e).__name__}: {e})") from None
    return out


def serving_blocks(ws, sv) -> list[tuple]:
    from navigator.serving.outputs import provenance

    out: list[tuple] = [("h", 2, "Serving profile (Triton)")]
    if sv.stand_in:
        out.append(("p", "**Stand-in:** the model was served through a CPU stand-in of NVIDIA's "
                         f"{sv.backend} backend; the figures show the method, not NVIDIA's backend's speed."))
    m = sv.machine or {}
    out.append(("table", ["", ""], [
        ["model", f"{sv.model} (format {sv.key})"], ["backend", sv.backend + (" (stand-in)" if sv.stand_in else "")],
        ["machine", f"{m.get('cpu') or '?'}, {m.get('cores')} cores, GPU {m.get('gpu') or 'none'}"],
        ["tool", sv.tool], ["search", sv.search],
        ["objective", ", ".join(f"{k} {v}" for k, v in (sv.objective or {}).items() if v is not None)],
        ["load", _load_text(sv)],
        ["server", _server_text(sv)],
        ["request batch sizes", ", ".join(map(str, sv.batch_sizes))],
        ["measurement window", (f"{sv.measurement_ms} ms" if sv.measurement_ms else "adaptive, 250-2000 ms per point")
         + " (stable: last 3 within 10%, at most 10)"],
        ["duration / budget", f"{sv.duration_s} s / " + ("no budget" if sv.budget_s is None else f"{sv.budget_s:g} s")
         + (f" (setup outside the budget: {sv.setup_s} s)" if sv.setup_s is not None else "")], ["date", sv.date],
        ["status", sv.status + (f": {sv.reason}" if sv.reason else "")]]))
    ens = getattr(sv, "ensemble", None)
    if ens is not None:
        out.append(("p", f"Ensemble **{ens.name}** measured end to end; the configurations below are its step "
                         f"**{ens.searched}** ({ens.role}): {ens.reason}."))
        out.append(("table", ["step", "role", "instances", "max batch", "busy", "queue ms", "compute ms", "batch"],
                    [[s.name, s.role, str(s.instances), str(s.max_batch_size),
                      "-" if s.utilization is None else f"{100 * s.utilization:.0f}%",
                      "-" if s.queue_ms is None else f"{s.queue_ms:.3f}",
                      "-" if s.compute_ms is None else f"{s.compute_ms:.3f}",
                      "-" if s.batch_size is None else f"{s.batch_size:.2f}"] for s in ens.steps]))
    by_name = {c.name: c for c in sv.configurations}
    rows = []
    for i, name in enumerate(sv.ranked, 1):
        c = by_name[name]
        b = c.best
        rows.append([str(i), name + (" (chosen)" if name == sv.chosen else ""), str(c.instances),
                     str(c.max_batch_size), "-" if c.max_queue_delay_us is None else str(c.max_queue_delay_us),
                     f"{b.throughput:.1f}", f"{b.latency_ms.get('p50', 0):.3f}", f"{b.latency_ms.get('p99', 0):.3f}",
                     b.level, "yes" if c.meets_constraints else "no", "yes" if b.stable else "no"])
    out.append(("h", 3, "Ranked configurations"))
    out.append(("table", ["rank", "configuration", "instances", "max batch", "queue delay us", "throughput/s",
                          "p50 ms", "p99 ms", "at load", "meets constraints", "stable"], rows))
    other = [c for c in sv.configurations if c.name not in sv.ranked]
    if other or sv.skipped:
        out.append(("h", 3, "Not ranked"))
        items = [[c.name, c.status, c.reason or ""] for c in other if c.status != "skipped"]
        items += [[s.split(":", 1)[0], "skipped", s.split(":", 1)[1].strip() if ":" in s else ""] for s in sv.skipped]
        out.append(("table", ["configuration", "status", "reason"], items))
    files = sv.files or {}
    for key, alt in (("throughput_v_latency", "throughput vs p99 latency"),
                     ("latency_v_concurrency", "latency percentiles vs load"),
                     ("gpu_mem_v_latency", "GPU memory vs latency")):
        if key in files and _inside(ws, files[key]) and ws.abs(files[key]).is_file():
            out.append(("img", ws.abs(files[key]), alt))
    if "gpu_mem_v_latency" not in files:
        out.append(("p", "No GPU memory plot: no GPU on the measuring machine."))
    chosen = ws.abs(files["chosen_config"]) if "chosen_config" in files and _inside(ws, files["chosen_config"]) \
        else None
    if chosen is not None and chosen.is_file():
        out.append(("h", 3, f"Chosen config.pbtxt ({sv.chosen})"))
        out.append(("code", chosen.read_text(encoding="utf-8")))
        if sv.applied:
            out.append(("p", f"Applied to `{sv.applied}`."))
    out.append(("h", 3, "Repeat on the serving machine"))
    out.append(("p", "Files in `serving/`: " + ", ".join(f"`{Path(v).name}`" for k, v in files.items()
                                                         if k in ("model_analyzer_yaml", "perf_analyzer_sh",
                                                                  "perf_input", "ranked_csv", "results_csv"))
                + ". `model-analyzer profile -f model_analyzer.yaml` or `bash perf_analyzer.sh`."))
    out.append(("p", "Provenance: " + " / ".join(provenance(sv))))
    return out


def _load_text(sv) -> str:
    load = sv.load or {"mode": "concurrency", "levels": sv.concurrency}
    levels = ", ".join(f"{x:g}" for x in load.get("levels") or [])
    if load.get("mode") == "request_rate":
        text = f"open loop at {levels} requests/s"
    elif load.get("mode") == "request_intervals":
        text = f"open loop at the intervals of {load.get('intervals_file')} (mean {levels} requests/s)"
    else:
        text = f"concurrency {levels}"
    return text + (", inputs in system shared memory" if load.get("shared_memory") == "system" else "")


def _server_text(sv) -> str:
    srv = sv.server or {}
    if not srv.get("remote"):
        return "navigator's own local tritonserver"
    text = f"{srv.get('url')} (Triton {srv.get('version') or '?'}, run by someone else)"
    if srv.get("loaded_configs"):
        text += "; configurations loaded there, " + ("then put back" if srv.get("restored") else
                                                    "NOT put back" if srv.get("restored") is False else
                                                    "nothing loaded")
    else:
        text += "; measured as served, nothing changed"
    return text


def _inside(ws, rel: str) -> bool:
    """``rel`` (a path status.yaml records) stays inside the workspace: a hand-edited record must
    not pull another file of the machine into the report."""
    from navigator.errors import UserInputError

    try:
        ws.abs(rel)
        return True
    except (UserInputError, TypeError, ValueError):
        return False


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(items: list[tuple], base: Path) -> str:
    out: list[str] = []
    for b in items:
        if b[0] == "h":
            out += ["#" * b[1] + " " + b[2], ""]
        elif b[0] == "p":
            out += [b[1], ""]
        elif b[0] == "table":
            header, rows = b[1], b[2]
            out.append("| " + " | ".join(_md_cell(h) for h in header) + " |")
            out.append("|" + "|".join("---" for _ in header) + "|")
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            out.append("")
        elif b[0] == "img":
            out += [f"![{b[2]}]({os.path.relpath(b[1], base)})", ""]
        elif b[0] == "code":
            out += ["```", b[1].rstrip("\n"), "```", ""]
    return "\n".join(out)


def _inline(text: str) -> str:
    """HTML of our small Markdown subset: **bold** and `code`."""
    import re

    t = html.escape(text)
    t = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", t)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", t)


def to_html(items: list[tuple], title: str) -> str:
    out = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\">", f"<title>{html.escape(title)}</title>",
           "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
           "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:90%}"
           "th{background:#f3f3f3}pre{background:#f7f7f7;padding:1em;overflow-x:auto}img{max-width:100%}</style>",
           "</head><body>"]
    for b in items:
        if b[0] == "h":
            out.append(f"<h{b[1]}>{_inline(b[2])}</h{b[1]}>")
        elif b[0] == "p":
            out.append(f"<p>{_inline(b[1])}</p>")
        elif b[0] == "table":
            out.append("<table><tr>" + "".join(f"<th>{_inline(h)}</th>" for h in b[1]) + "</tr>")
            out += ["<tr>" + "".join(f"<td>{_inline(str(c))}</td>" for c in row) + "</tr>" for row in b[2]]
            out.append("</table>")
        elif b[0] == "img":
            data = base64.b64encode(Path(b[1]).read_bytes()).decode("ascii")
            out.append(f"<p><img alt=\"{html.escape(b[2])}\" src=\"data:image/png;base64,{data}\"></p>")
        elif b[0] == "code":
            out.append(f"<pre>{html.escape(b[1])}</pre>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write(ws, st, *, html_too: bool = False) -> Path:
    """(Re)write ``WS/report/summary.md`` (and ``summary.html``); returns the Markdown path."""
    from navigator.workspace.atomic import write_text

    ws.check_no_links()
    folder = ws.report_dir
    folder.mkdir(parents=True, exist_ok=True)
    items = blocks(ws, st)
    path = folder / "summary.md"
    write_text(path, to_markdown(items, folder))
    if html_too:
        write_text(folder / "summary.html", to_html(items, f"Navigator report: {st.model.name}"))
    return path
