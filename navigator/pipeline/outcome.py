"""The run's verdict: the best (format, runner), and the exit code with the reasons of
the requested targets that failed."""

from __future__ import annotations

from navigator import formats
from navigator.execution import racing
from navigator.workspace.status import Best, RunnerUp, Status


def select_best(st: Status, *, no_profile: bool) -> Best | None:
    """Highest throughput among verified (format, runner) of formats a server runs as they were
    verified (formats.serving_refusal), a contender the race dropped below the eligible pairs it
    kept (:func:`racing.ranking`: its figure froze when it left; the leader's later windows may read
    lower on a loaded machine, and its margin then is below 1); by preference with --no-profile."""
    candidates = []
    for key, fs in st.formats.items():
        if fs.convert.status != "ok" or formats.serving_refusal(key, fs):   # best is what a server runs as verified
            continue
        for rkey, rs in fs.runners.items():
            if rs.verify.status != "ok":
                continue
            candidates.append((key, rkey, *racing.placed(rs.profile)))
    if not candidates:
        return None
    profiled = [c for c in candidates if c[2] is not None]
    if profiled and not no_profile:
        # a contender the race dropped ranks below the pairs it kept: its figure froze when it left
        keys = racing.ranking([(c[2].throughput, c[3]) for c in profiled])
        ranked = [c for _, c in sorted(zip(keys, profiled), key=lambda kc: kc[0], reverse=True)]
        key, rkey, peak, _ = ranked[0]
        best = Best(key=key, runner=rkey, batch_size=peak.batch_size, throughput=peak.throughput, basis="profile",
                    spread=peak.spread)
        profile = st.formats[key].runners[rkey].profile
        best.stable = bool(profile.stable) and not racing.unstable(peak.spread)
        if len(ranked) > 1:
            k2, r2, p2, _ = ranked[1]
            best.runner_up = RunnerUp(key=k2, runner=r2, batch_size=p2.batch_size, throughput=p2.throughput,
                                      spread=p2.spread)
            best.margin = round(peak.throughput / p2.throughput, 4) if p2.throughput else None
            floor = _floor(st.formats[key], peak, st.formats[k2], p2)
            best.separated = racing.separated(peak.throughput, peak.spread, p2.throughput, p2.spread, floor)
            raced = bool(peak.raced and p2.raced)
            if raced:   # raced side by side: the race's verdict (its paired rule too)
                best.separated = racing.dropped(st.formats[k2].runners[r2].profile.reason)
        else:
            floor, raced = racing.SPREAD_FLOOR, False
        best.note = trust_note(best, profile, floor, raced)
        return best
    key, rkey, *_ = min(candidates, key=lambda c: formats.preference_rank(c[0]))
    return Best(key=key, runner=rkey, basis="preference")


def _screened_by_caller(fs) -> bool:
    """A live source's own runners: only the calling process can run them, so it screens them.
    (Its children are exported in the calling process too -- ``isolated: false`` -- but their
    runners are screened by the race worker.)"""
    return fs.parent is None and fs.isolated is False


def _floor(fs, peak, fs2, p2) -> float:
    """The spread floor between two figures: :data:`racing.CROSS_FLOOR` when they were measured
    in different processes at different moments (a live module's screening in the calling
    process, a format's in the worker), not side by side in the race."""
    if peak.raced and p2.raced:
        return racing.SPREAD_FLOOR
    return racing.CROSS_FLOOR if _screened_by_caller(fs) != _screened_by_caller(fs2) else racing.SPREAD_FLOOR


def trust_note(best: Best, profile, floor: float = racing.SPREAD_FLOOR, raced: bool = False) -> str | None:
    """Why ``best`` is not a pick to trust (unstable, or not separated from the runner-up), or None."""
    notes = []
    if best.stable is False:
        if racing.unstable(best.spread):
            notes.append(f"unstable: its window spread {best.spread:.2f} exceeds {racing.UNSTABLE_SPREAD:.2f}")
        else:
            notes.append(f"unstable: {profile.reason or 'its profile did not settle'}")
    if best.separated is False and best.runner_up is not None:
        ru = best.runner_up
        ahead = "ahead" if best.margin is None else f"{best.margin:.2f}x ahead"   # None: a zero runner-up figure
        if raced:
            notes.append(f"not separated from {ru.key} on {ru.runner} in the race: {ahead}")
        else:
            need = racing.needed_margin(best.spread, ru.spread, floor)
            notes.append(f"not separated from {ru.key} on {ru.runner}: {ahead}, within the "
                         f"windows' spread (needs > {need:.2f}x)")
    return "; ".join(notes) or None


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
            if formats.registry.serving_check(fs.format, rkey):   # decides serving (navigator triton), not the run
                continue
            if rs.verify.status in ("failed", "inconclusive"):   # inconclusive: not verified, whatever it says
                cure = verdict_cure(key, fs, rs.verify)
                failures.append(f"{key} on {rkey}: verification {rs.verify.status}: {rs.verify.reason}"
                                + (f"; cure: {cure}" if cure else ""))
    return (1 if failures else 0), failures


def verdict_cure(key: str, fs, verify) -> str | None:
    """What to do about a failed or inconclusive verdict, in one clause: the outputs' recorded cures
    when inconclusive; for a failed one, a higher precision or an explicit budget when a task rule
    rejected it, else where to look (navigator debug for graph formats) or an explicit tolerance."""
    checks = verify.outputs or {}
    if verify.status == "inconclusive":
        cures = [c.cure for c in checks.values() if c.cure]
        if not cures:
            return None
        return cures[0] + (f" (likewise for the {len(cures) - 1} other outputs)" if len(cures) > 2 else
                           " (likewise for the other output)" if len(cures) == 2 else "")
    failed = {name: c for name, c in checks.items() if not c.passed}
    if not failed:
        return None
    from navigator.validators.tolerances import TASK_MODE

    name = next(iter(failed))
    mode = next((c.mode for c in failed.values() if c.mode in TASK_MODE.values()), None)
    if mode is not None:
        return (f"this {fs.precision} format changes the task's answer on these samples: serve a higher precision, "
                f"or state the budget your task allows (--compare {name}:{mode}=VALUE)")
    debug = (f"`navigator debug WS {key}` names the first node that leaves tolerance, or "
             if getattr(formats.find(fs.format), "debug_side", None) else "")
    return f"{debug}state the tolerance your task allows (--atol {name}:VALUE, --rtol {name}:VALUE)"
