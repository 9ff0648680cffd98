"""One verdict for the zoo: a model x format table, on the console and in ``<workdir>/summary.md``.

Each cell is read from the model's status.yaml (never from what the tasks said): ``ok`` when
the format converted and every runner verified it (with its best measured throughput when it
was profiled), else ``failed``, ``skipped`` or ``not verified``; ``-`` when the model has no
such format."""

from __future__ import annotations

from pathlib import Path

from navigator.many import placement
from navigator.many.outcome import ManyResult, ModelOutcome
from navigator.workspace.layout import Workspace

ICONS = {"ok": "✅", "failed": "❌", "error": "❌", "skipped": "⏭️", "interrupted": "⏸️",
         "not run": "⏸️"}


def _rate(value: float) -> str:
    for scale, unit in ((1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.1f}{unit}/s"
    return f"{value:.1f}/s"


def _status(m: ModelOutcome):
    from navigator.errors import UserInputError
    from navigator.workspace import status as status_mod

    path = m.workspace / "status.yaml"
    if not path.is_file():
        return None
    try:
        return status_mod.load(path)
    except UserInputError:
        return None


def format_cell(fs) -> str:
    """One format's verdict (see the module docstring)."""
    if fs.convert.status != "ok":
        return fs.convert.status
    verdicts = [r.verify.status for r in fs.runners.values()]
    if "failed" in verdicts:
        return "failed"
    if "ok" not in verdicts:
        return "not verified"
    peaks = [r.profile.peak() for r in fs.runners.values()
             if r.verify.status == "ok" and r.profile.status == "ok" and r.profile.results]
    best = max((p.throughput for p in peaks if p is not None), default=None)
    return "ok" if best is None else f"ok {_rate(best)}"


def table(result: ManyResult) -> tuple[list[str], list[list[str]]]:
    """(headers, rows): model, result, one column per format key (in order of first appearance), best,
    nodes and retries (this run's attempts in placement.yaml)."""
    statuses = {m.name: _status(m) for m in result.models}
    keys: list[str] = []
    for st in statuses.values():
        for key in (st.formats if st else ()):
            if key not in keys:
                keys.append(key)
    rows = []
    for m in result.models:
        st = statuses[m.name]
        cells = [format_cell(st.formats[k]) if st and k in st.formats else "-" for k in keys]
        best = "-"
        if st is not None and st.best is not None:
            b = st.best
            best = f"{b.key} ({b.runner}" + (f", {_rate(b.throughput)} @ {b.batch_size}" if b.throughput else "") + ")"
        state = m.result if st is None or st.state != "interrupted" or m.interrupted else "interrupted"
        attempts = placement.attempts(Workspace(m.workspace))
        nodes = list(dict.fromkeys(str(a.get("node"))[:8] for a in attempts if a.get("node")))
        lost = sum(a.get("outcome") == "lost" for a in attempts)
        rows.append([m.name, state, *cells, best, ",".join(nodes) or "-", str(lost)])
    return ["model", "result", *keys, "best", "nodes", "retries"], rows


def headline(result: ManyResult) -> str:
    counts: dict[str, int] = {}
    for m in result.models:
        counts[m.result] = counts.get(m.result, 0) + 1
    how = "in parallel on Ray" if result.parallel else "one at a time (no Ray)"
    parts = ", ".join(f"{n} {what}" for what, n in counts.items())
    return f"{len(result.models)} models ({parts}) {how} in {result.wall_s:.1f} s; exit code {result.exit_code}"


def errors(result: ManyResult) -> list[str]:
    out = []
    for m in result.models:
        if m.message:
            out.append(f"{m.name}: {m.message}")
        out += [f"{m.name}: {f}" for f in m.failures]
    return out


def markdown(result: ManyResult) -> str:
    headers, rows = table(result)

    def md(text: str) -> str:
        return " ".join(str(text).split()).replace("|", "\\|")

    def icon(text: str) -> str:
        word = text.split(" ")[0]
        mark = ICONS.get(word) or ICONS.get(text)
        return f"{mark} {text}" if mark else text

    lines = [f"# Navigator convert-many: `{Path(result.manifest.source).name}`", "",
             f"{headline(result)}. Workdir `{result.workdir}`; each model's workspace is "
             "`<model>.nav.workspace/` (placement.yaml says where each step ran).", "",
             "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        n = len(headers)
        shown = [md(row[0])] + [md(icon(c)) for c in row[1:n - 3]] + [md(c) for c in row[n - 3:]]
        lines.append("| " + " | ".join(shown) + " |")
    problems = errors(result)
    if problems:
        lines += ["", "## Errors and failures", ""] + [f"- {md(p)}" for p in problems]
    return "\n".join(lines) + "\n"


def write(result: ManyResult) -> Path:
    from navigator.workspace.atomic import write_text

    path = result.workdir / "summary.md"
    result.workdir.mkdir(parents=True, exist_ok=True)
    write_text(path, markdown(result))
    return path


def show(result: ManyResult, reporter) -> None:
    headers, rows = table(result)
    reporter.table("convert-many", headers, rows)
    reporter.info(headline(result))
