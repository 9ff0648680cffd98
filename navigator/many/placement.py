"""``<workspace>/placement.yaml``: where each step of a workspace ran, and every attempt.

``navigator convert-many`` runs each model in one or two phases (``build``: export, convert,
verify; ``measure``: verify and profile alone on a node; ``full``: both, when nothing is
measured or no cluster is used), each phase as one task on some node. This file says, for
the latest convert-many run, which attempts ran where and how each ended, and for every
step which attempt (of this run or an earlier one) produced it::

    run: {id: 20261124-070912-3f2a, manifest: /ci/zoo.yaml, driver: ci-host, started: …}
    attempts:
    - {attempt: 1, phase: build, node: c0b48394…, host: gpu-7, ip: 10.0.0.7, pid: 4242,
       started: …, ended: …, outcome: lost, reason: "node c0b48394 died (NodeDiedError)"}
    - {attempt: 2, phase: build, retry_of: 1, node: 86cde9ae…, host: gpu-3, …, outcome: ok}
    steps:
      onnx: {export: {attempt: 1, node: c0b48394…, host: gpu-7, run: 20261124-070912-3f2a}, …}

Outcomes: ``running`` (still, or its process was killed before it could say), ``ok`` (the
phase's run ended; its formats may still have failed: status.yaml says), ``error`` (the run
stopped with an error line, in ``reason``), ``interrupted`` (Ctrl-C), ``lost`` (its node or
worker died; retried while retries last). A step that a later attempt reused keeps the
attempt that made it. status.yaml stays exactly what ``navigator convert`` writes; this file
sits beside it. Only one attempt of a model runs at a time, so there is one writer at a time.
"""

from __future__ import annotations

from typing import Any

from navigator.workspace.layout import Workspace

OUTCOMES = ("running", "ok", "error", "interrupted", "lost")


def now() -> str:
    """UTC, to the millisecond: attempts on one node are ordered by these times."""
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def load(ws: Workspace) -> dict:
    import yaml

    try:
        data = yaml.safe_load(ws.placement_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def save(ws: Workspace, data: dict) -> None:
    import yaml

    from navigator.workspace.atomic import write_text

    ws.root.mkdir(parents=True, exist_ok=True)
    write_text(ws.placement_path, yaml.safe_dump(data, sort_keys=False, width=120))


def begin_run(ws: Workspace, run: dict) -> None:
    """A new convert-many run: this run's header, no attempts yet; the steps of earlier runs stay
    (a re-run reuses them)."""
    old = load(ws)
    save(ws, {"run": dict(run), "attempts": [], "steps": old.get("steps") or {}})


def start_attempt(ws: Workspace, attempt: dict) -> None:
    data = load(ws)
    attempts = [a for a in data.get("attempts") or [] if a.get("attempt") != attempt["attempt"]]
    data["attempts"] = attempts + [{**attempt, "outcome": "running"}]
    save(ws, data)


def end_attempt(ws: Workspace, number: int, outcome: str, reason: str | None = None, **extra: Any) -> None:
    """Record how attempt ``number`` ended (only while it is still ``running``: an attempt that
    ended on its own keeps its word)."""
    data = load(ws)
    for a in data.get("attempts") or []:
        if a.get("attempt") == number and a.get("outcome") == "running":
            a.update({"ended": now(), "outcome": outcome, **extra})
            if reason:
                a["reason"] = " ".join(str(reason).split())[:500]
            save(ws, data)


def record_step(ws: Workspace, key: str, step: str, by: dict) -> None:
    data = load(ws)
    data.setdefault("steps", {}).setdefault(key, {})[step] = dict(by)
    save(ws, data)


def keep_steps_of(ws: Workspace, keys: list[str]) -> None:
    """Forget the steps of formats the workspace no longer has."""
    data = load(ws)
    steps = data.get("steps") or {}
    if any(k not in keys for k in steps):
        data["steps"] = {k: v for k, v in steps.items() if k in keys}
        save(ws, data)


def attempts(ws: Workspace) -> list[dict]:
    return list(load(ws).get("attempts") or [])


def beside_measurements(attempts: list[dict]) -> list[str]:
    """Attempts (of any models) that ran on the same node at the same time as a ``measure``
    attempt: empty when every measurement ran alone, as the scheduling promises. For audits
    and tests; an attempt still ``running`` (no ``ended``) counts as open-ended."""
    def span(a: dict) -> tuple[str, str]:
        return a["started"], a.get("ended") or "9999"

    clashes = []
    for m in (a for a in attempts if a.get("phase") == "measure"):
        lo, hi = span(m)
        for other in attempts:
            if other is m or other.get("node") != m.get("node"):
                continue
            olo, ohi = span(other)
            if olo < hi and lo < ohi:
                clashes.append(f"{other.get('model', '?')} {other.get('phase')} attempt {other.get('attempt')} ran "
                               f"beside {m.get('model', '?')} measure attempt {m.get('attempt')} on node "
                               f"{str(m.get('node'))[:8]}")
    return clashes
