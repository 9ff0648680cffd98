"""The run's verdict: the best (format, runner), and the exit code with the reasons of
the requested targets that failed."""

from __future__ import annotations

from navigator import formats
from navigator.workspace.status import Best, Status


def select_best(st: Status, *, no_profile: bool) -> Best | None:
    """Highest throughput among verified (format, runner); by preference with --no-profile."""
    candidates = []
    for key, fs in st.formats.items():
        if fs.convert.status != "ok":
            continue
        for rkey, rs in fs.runners.items():
            if rs.verify.status != "ok":
                continue
            peak = rs.profile.peak() if rs.profile.status == "ok" else None
            candidates.append((key, rkey, peak))
    if not candidates:
        return None
    profiled = [c for c in candidates if c[2] is not None]
    if profiled and not no_profile:
        key, rkey, peak = max(profiled, key=lambda c: c[2].throughput)
        return Best(key=key, runner=rkey, batch_size=peak.batch_size, throughput=peak.throughput, basis="profile")
    key, rkey, _ = min(candidates, key=lambda c: formats.preference_rank(c[0]))
    return Best(key=key, runner=rkey, basis="preference")


def outcome_code(st: Status, requested: list[str]) -> tuple[int, list[str]]:
    """Exit code (0 or 1) and the reasons of the requested targets that failed, or whose
    verification was inconclusive (a check that could not fail proves nothing)."""
    failures = []
    for key in requested:
        fs = st.formats.get(key)
        if fs is None:
            continue
        if fs.convert.status == "failed":
            failures.append(f"{key}: conversion failed: {fs.convert.reason}")
            continue
        for rkey, rs in fs.runners.items():
            if rs.verify.status in ("failed", "inconclusive"):   # inconclusive: not verified, whatever it says
                failures.append(f"{key} on {rkey}: verification {rs.verify.status}: {rs.verify.reason}")
    return (1 if failures else 0), failures
