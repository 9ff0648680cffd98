"""The honest best and the race: the separation rule, what ``best`` records and says (console,
gate), and the race driver on deterministic window figures.

The race tests drive :func:`navigator.execution.racing.race` with a test double for the clock
(a counter that advances a fixed step per call) and for the window function (fixed throughput
sequences): real timings would make pass/fail depend on the machine's load."""

from __future__ import annotations

import itertools
import time

import pytest

from navigator.console import best_line
from navigator.execution import racing
from navigator.execution.racing import Entrant, Window, contenders, race, separated
from navigator.pipeline import select_best
from navigator.tools.gate import parse_policy
from navigator.tools.gate.evaluate import _check_best
from navigator.workspace.status import (ConvertStep, FormatStatus, ModelInfo, ProfileResult, ProfileStep,
                                        RunnerStatus, Status, VerifyStep)


# --------------------------------------------------------------------------- the rule
@pytest.mark.parametrize("fast, fs, slow, ss, expected", [
    (110.0, 0.02, 100.0, 0.02, True),      # 107.8 > 101
    (104.0, 0.10, 100.0, 0.10, False),     # 98.8 < 105: within the spread
    (400.0, 1.26, 100.0, 0.05, True),      # a very noisy figure far ahead is still ahead
    (150.0, 1.26, 100.0, 0.05, False),     # ... but not 1.5x ahead
    (108.0, None, 100.0, None, False),     # no spread recorded: counts as the 10% bound
    (112.0, None, 100.0, None, True),
    (101.5, 0.001, 100.0, 0.001, False),   # spreads below the 2% floor count as 2%: 1.5% is no lead
    (103.0, 0.001, 100.0, 0.001, True),
])
def test_separation_needs_the_window_ranges_apart(fast, fs, slow, ss, expected):
    assert separated(fast, fs, slow, ss) is expected
    assert (fast / slow > racing.needed_margin(fs, ss)) is expected


# --------------------------------------------------------------------------- best
def _runner(results, *, stable=True, runner="onnxruntime") -> RunnerStatus:
    return RunnerStatus(runner=runner, device="cpu", verify=VerifyStep(status="ok"),
                        profile=ProfileStep(status="ok", stable=stable,
                                            results=[ProfileResult(b, t, spread=s) for b, t, s in results]))


def _status(**runners) -> Status:
    st = Status(model=ModelInfo(name="m", source_format="onnx"))
    for key, rs in runners.items():
        key = key.replace("_", "-")
        st.formats[key] = FormatStatus(format="onnx", convert=ConvertStep(status="ok"), runners={"onnxruntime-cpu": rs})
    return st


def test_a_best_far_ahead_is_separated_and_says_by_how_much():
    st = _status(onnx=_runner([(1, 100.0, 0.02), (8, 300.0, 0.03)]), onnx_optimized=_runner([(8, 200.0, 0.04)]))
    best = select_best(st, no_profile=False)
    assert (best.key, best.batch_size, best.stable, best.separated, best.margin) == ("onnx", 8, True, True, 1.5)
    assert (best.runner_up.key, best.runner_up.throughput, best.runner_up.spread) == ("onnx-optimized", 200.0, 0.04)
    assert best.note is None and best.trusted
    assert "1.50x ahead of onnx-optimized on onnxruntime-cpu" in best_line(best)


def test_an_inseparable_best_says_so():
    st = _status(onnx=_runner([(8, 104.0, 0.08)]), onnx_optimized=_runner([(8, 100.0, 0.06)]))
    best = select_best(st, no_profile=False)
    assert best.key == "onnx" and best.separated is False and best.stable is True and not best.trusted
    assert "not separated from onnx-optimized" in best.note and "1.04x ahead" in best.note
    assert "NOT A SURE PICK" in best_line(best)


def test_an_unstable_best_says_so_even_far_ahead():
    """The issue's case: a window spread of 1.26 reported ok must not make a silent best."""
    st = _status(onnx=_runner([(8, 900.0, 1.26)]), onnx_optimized=_runner([(8, 100.0, 0.02)]))
    best = select_best(st, no_profile=False)
    assert best.separated is True and best.stable is False
    assert "unstable: its window spread 1.26 exceeds 0.10" in best.note
    st = _status(onnx=_runner([(8, 900.0, 0.02)], stable=False))      # cut short by the budget
    assert select_best(st, no_profile=False).stable is False


def test_screenings_of_the_two_processes_need_a_wider_margin_to_be_separated():
    """A live module's figure (screened by the calling process, isolated: false) against a
    format's screened by the worker: 1.06x ahead is within CROSS_FLOOR (seen: such a pick was
    0.94x in interleaved rounds), so not separated; the same two figures raced side by side, or
    both from the worker, are separated by the 2% floor; 1.2x ahead is separated either way."""
    def status(lead, other, *, raced=False):
        st = _status(onnx=_runner([(64, lead, 0.04)]), onnx_optimized=_runner([(64, other, 0.03)]))
        # onnx plays the live source (screened by the calling process); onnx-optimized its child,
        # exported in the calling process too (isolated: false) but screened by the race worker
        st.formats["onnx"].isolated = st.formats["onnx-optimized"].isolated = False
        st.formats["onnx-optimized"].parent = "onnx"
        for fs in st.formats.values():
            fs.runners["onnxruntime-cpu"].profile.results[0].raced = raced or None
        return st

    best = select_best(status(37_678.0, 35_660.0), no_profile=False)
    assert best.key == "onnx" and best.margin == pytest.approx(1.0566, abs=1e-4) and best.separated is False
    assert "not separated from onnx-optimized" in best.note and "needs > 1.11x" in best.note
    raced = status(37_678.0, 35_660.0, raced=True)   # side by side: the race dropped the runner-up
    raced.formats["onnx-optimized"].runners["onnxruntime-cpu"].profile.reason = f"{racing.OUT}separated from onnx"
    assert select_best(raced, no_profile=False).separated is True
    same = status(37_678.0, 35_660.0)
    same.formats["onnx"].isolated = True    # a file source: both screened by the worker
    assert select_best(same, no_profile=False).separated is True
    assert select_best(status(43_000.0, 35_660.0), no_profile=False).separated is True


def test_a_lone_candidate_has_no_runner_up():
    best = select_best(_status(onnx=_runner([(8, 900.0, 0.02)])), no_profile=False)
    assert best.runner_up is None and best.separated is None and best.margin is None and best.trusted


def test_a_raced_figure_is_the_profiles_peak_and_best():
    """The race measured the contenders side by side at their screening peaks; a screening figure
    of the winner at another batch size (measured alone, earlier, in shorter windows) read higher.
    The raced figure is the profile's peak, best's figure and batch, and the gate's: the screening
    figure beside it is kept, not used. Without a race the peak is the highest figure."""
    from navigator.tools.gate.evaluate import best_throughput

    winner = _runner([(16, 70_000.0, 0.02), (32, 74_000.0, 0.05)])
    winner.profile.phase, winner.profile.results[0].raced = "race", True
    other = _runner([(16, 69_500.0, 0.02)])
    other.profile.phase, other.profile.results[0].raced = "race", True
    assert winner.profile.peak().batch_size == 16
    best = select_best(_status(onnx=winner, onnx_optimized=other), no_profile=False)
    assert (best.key, best.batch_size, best.throughput) == ("onnx", 16, 70_000.0)
    assert best.separated is False and best.runner_up.key == "onnx-optimized"
    assert best_throughput(_status(onnx=winner).formats["onnx"])[1].throughput == 70_000.0
    assert best_throughput(_status(onnx=winner).formats["onnx"], 32)[1].throughput == 74_000.0
    assert _runner([(16, 70_000.0, 0.02), (32, 74_000.0, 0.05)]).profile.peak().batch_size == 32


# --------------------------------------------------------------------------- gate
def _policy(rule=None):
    data = {"require_formats": ["onnx"]}
    if rule is not None:
        data["best"] = rule
    return parse_policy(data)


def test_gate_best_rules():
    sure = _status(onnx=_runner([(8, 300.0, 0.02)]), onnx_optimized=_runner([(8, 100.0, 0.02)]))
    close = _status(onnx=_runner([(8, 104.0, 0.08)]), onnx_optimized=_runner([(8, 100.0, 0.06)]))
    shaky = _status(onnx=_runner([(8, 900.0, 1.26)]), onnx_optimized=_runner([(8, 100.0, 0.02)]))
    for st in (sure, close, shaky):
        st.best = select_best(st, no_profile=False)
    assert _policy().best == "warn"
    assert _check_best(sure, "warn") is None
    warned = _check_best(close, "warn")
    assert warned.skipped and "not separated" in warned.message
    assert _check_best(close, "any") is None
    assert _check_best(sure, "separated").passed
    assert not _check_best(close, "separated").passed
    assert _check_best(close, "stable").passed
    assert not _check_best(shaky, "stable").passed and "unstable" in _check_best(shaky, "stable").message
    sure.best = select_best(sure, no_profile=True)
    assert not _check_best(sure, "stable").passed      # chosen by preference: nothing measured


def test_gate_best_rule_is_checked():
    from navigator.errors import UserInputError

    with pytest.raises(UserInputError, match="best: expected one of separated, stable, warn, any"):
        _policy("always")


# --------------------------------------------------------------------------- the race
def _clock(step: float):
    """A test double for the clock: each call advances it by ``step`` seconds."""
    counter = itertools.count()
    return lambda: next(counter) * step


def _windows(figures: dict[str, list[float]]):
    """A test double for measuring a window: entrant name -> its throughputs in turn (batch 1,
    ten inferences each), cycling."""
    streams = {name: itertools.cycle(values) for name, values in figures.items()}

    def window(e: Entrant) -> Window:
        thr = next(streams[e.name])
        return Window(batch_size=1, latencies=[1.0 / thr] * 10)
    return window


def _entrants(*names_thr):
    return [Entrant(name=n, batch_size=1, screen_throughput=t, screen_spread=s) for n, t, s in names_thr]


def test_screening_keeps_only_the_contenders():
    screened = _entrants(("a", 100.0, 0.05), ("b", 97.0, 0.05), ("c", 50.0, 0.05), ("d", 110.0, 0.3))
    assert [e.name for e in contenders(screened)] == ["d", "a", "b"]
    assert [e.name for e in contenders(_entrants(("a", 300.0, 0.02), ("b", 100.0, 0.02)))] == ["a"]


def test_a_runner_screened_by_the_calling_process_is_raced_unless_far_behind():
    """Screenings of the two processes, moments apart: a peer 1.06x behind the worker's leader
    (or a leader 1.06x ahead of the worker's runners) is a contender; 1.2x behind it is out; two
    of the worker's own 1.06x apart are separated by the 2% floor, as before."""
    def entrants(*rows):
        return [Entrant(name=n, batch_size=64, screen_throughput=t, screen_spread=0.03, caller=c) for n, t, c in rows]

    assert [e.name for e in contenders(entrants(("ts", 37_700.0, False), ("compile", 35_600.0, True),
                                                ("eager", 31_000.0, True), ("onnx", 35_600.0, False)))] \
        == ["ts", "compile"]
    assert [e.name for e in contenders(entrants(("compile", 37_700.0, True), ("ts", 35_600.0, False),
                                                ("eager", 35_600.0, True)))] == ["compile", "ts"]


def test_an_unstable_screening_figure_does_not_rule_its_runner_out():
    """A figure whose windows spread more than 10% may be low because it was disturbed (seen: a
    TorchScript transformer block screened at 9.6k/s with spread 0.21 beside a 36k/s leader, then
    40k/s when measured again): far behind, it is still raced. A stable one as far behind is out."""
    screened = _entrants(("lead", 36_000.0, 0.03), ("disturbed", 9_600.0, 0.21), ("slow", 9_600.0, 0.05))
    assert [e.name for e in contenders(screened)] == ["lead", "disturbed"]


def test_the_race_drops_a_separated_contender_and_settles():
    entrants = _entrants(("a", 100.0, 0.2), ("b", 95.0, 0.2))
    result = race(entrants, _windows({"a": [120.0, 121.0, 119.0], "b": [100.0, 101.0, 99.0]}), budget_s=100.0,
                  clock=_clock(0.1))
    assert result.settled and result.leader == "a" and result.rounds == racing.RACE_MIN_WINDOWS
    assert "separated from a" in entrants[1].out
    thr, spread = entrants[0].figure()
    assert thr == pytest.approx(120.0, rel=0.01) and spread < 0.02


def test_the_race_interleaves_windows():
    order = []
    window = _windows({"a": [120.0], "b": [100.0], "c": [90.0]})
    race(_entrants(("a", 100.0, 0.2), ("b", 95.0, 0.2), ("c", 90.0, 0.2)),
         lambda e: order.append(e.name) or window(e), budget_s=100.0, clock=_clock(0.1))
    assert order[:9] == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]   # one each a round, the order alternating


def test_no_round_starts_that_would_end_past_the_budget():
    """Windows of a slow model (3 s each, two contenders: 6 s a round) and a 20 s budget: the race
    stops after 3 rounds (18 s), not after the round that ends at 24 s."""
    now = [0.0]

    def window(e: Entrant) -> Window:
        now[0] += 3.0
        return Window(batch_size=1, latencies=[0.3] * 10)

    entrants = _entrants(("a", 100.0, 0.3), ("b", 99.0, 0.3))
    result = race(entrants, window, budget_s=20.0, clock=lambda: now[0])
    assert result.rounds == 3 and now[0] == 18.0 and "budget of 20 s ended the race" in result.reason


def test_a_budget_that_ends_the_race_says_so():
    entrants = _entrants(("a", 100.0, 0.2), ("b", 99.0, 0.2))
    # noisy, overlapping, out of phase: never separated, no tie, and no bound on either's lead
    result = race(entrants, _windows({"a": [60.0, 140.0], "b": [140.0, 60.0]}), budget_s=1.0, clock=_clock(0.1))
    assert not result.settled and "budget of 1 s ended the race" in result.reason
    assert result.leader in ("a", "b") and entrants[0].out is None and entrants[1].out is None
    assert not result.capped
    entrants = _entrants(("a", 100.0, 0.2), ("b", 99.0, 0.2))
    result = race(entrants, _windows({"a": [60.0, 140.0], "b": [140.0, 60.0]}), budget_s=100.0, clock=_clock(0.1),
                  max_rounds=4)
    assert result.capped and result.rounds == 4 and result.reason.startswith("4 rounds left")


def test_a_contender_behind_in_every_paired_round_is_out_though_the_ranges_overlap():
    """The machine's drift moves both contenders' windows alike, round by round: their window
    ranges overlap (spreads ~0.25) so the range rule cannot separate them, but b is 5% behind a in
    every round; after RACE_PAIRED rounds b is out. Equal contenders with the same drift, or 1%
    behind in every round, are not out: a tie (paired, the drift cancels)."""
    drift = [100.0, 80.0, 110.0, 90.0, 105.0, 85.0]
    entrants = _entrants(("a", 100.0, 0.05), ("b", 97.0, 0.05))
    result = race(entrants, _windows({"a": drift, "b": [x / 1.05 for x in drift]}), budget_s=100.0, clock=_clock(0.1))
    assert result.settled and result.leader == "a" and result.rounds == racing.RACE_PAIRED
    assert entrants[1].out.startswith(f"behind a in each of the last {racing.RACE_PAIRED} interleaved rounds (1.05x")
    thr_a, spread_a = entrants[0].figure()
    thr_b, spread_b = entrants[1].figure()
    assert not separated(thr_a, spread_a, thr_b, spread_b)    # the range rule alone could not tell
    for ratio in (1.0, 1.01):
        entrants = _entrants(("a", 100.0, 0.05), ("b", 97.0, 0.05))
        result = race(entrants, _windows({"a": drift, "b": [x / ratio for x in drift]}), budget_s=100.0,
                      clock=_clock(0.1))
        assert not result.settled and "a tie" in result.reason and entrants[1].out is None
        assert result.rounds == racing.RACE_TIE_ROUNDS


def test_a_contender_shown_slower_over_the_paired_rounds_is_out_though_it_won_one():
    """A loaded machine: windows swing 60-140 round by round and b wins round 3, so neither the
    range rule nor the every-round rule can drop it; over the 5 paired rounds a is at least 1.02x
    ahead at ~97.5% (a t bound on the log ratios), so b is out and the race settles. The same swings
    with b 1% behind on average bound nothing: the race goes on."""
    drift = [100.0, 60.0, 140.0, 80.0, 120.0]
    ratios = [1.3, 1.5, 0.95, 1.4, 1.35]
    a, b = _entrants(("a", 100.0, 0.05), ("b", 97.0, 0.05))
    result = race([a, b], _windows({"a": [x * r for x, r in zip(drift, ratios)], "b": drift}), budget_s=100.0,
                  clock=_clock(0.1))
    assert result.settled and result.leader == "a" and result.rounds == racing.RACE_PAIRED
    assert b.out.startswith("slower than a over 5 interleaved rounds") and "at least 1.03x ahead" in b.out
    assert racing.paired_lead(a, b) is None and not separated(*a.figure(), *b.figure())
    a, b = _entrants(("a", 100.0, 0.05), ("b", 97.0, 0.05))
    result = race([a, b], _windows({"a": [x * r for x, r in zip(drift, [1.3, 0.8, 1.0, 1.1, 0.9])], "b": drift}),
                  budget_s=2.0, clock=_clock(0.1))
    assert not result.settled and b.out is None and a.out is None


def test_equal_contenders_under_drift_end_the_race_as_a_paired_tie():
    """The same kernels twice (two ONNX graphs of one CNN) on a machine whose load drifts: the
    windows spread ~0.3, too unstable for the figures' tie rule, but round by round they are
    within 1% and each wins some rounds: a tie after RACE_TIE_ROUNDS. About 4% apart round by
    round they are not: b is out once it lost 5 rounds in a row."""
    drift = [100.0, 80.0, 110.0, 90.0, 105.0, 85.0, 95.0]
    wobble = [1.01, 0.99, 1.005, 0.995, 1.0, 1.01, 0.99]
    entrants = _entrants(("a", 100.0, 0.05), ("b", 99.0, 0.05))
    result = race(entrants, _windows({"a": drift, "b": [x / w for x, w in zip(drift, wobble)]}), budget_s=100.0,
                  clock=_clock(0.1))
    assert not result.settled and result.rounds == racing.RACE_TIE_ROUNDS and "a tie" in result.reason
    apart = [1.04, 1.05, 0.99, 1.04, 1.03, 1.06, 1.04]
    entrants = _entrants(("a", 100.0, 0.05), ("b", 99.0, 0.05))
    result = race(entrants, _windows({"a": drift, "b": [x / w for x, w in zip(drift, apart)]}), budget_s=100.0,
                  clock=_clock(0.1))
    assert result.settled and entrants[1].out.startswith("behind a in each of the last")


def test_best_between_two_raced_figures_is_the_races_verdict():
    """Raced side by side, the runner-up is separated when the race dropped it (its reason says
    so), whatever the two final figures' ranges; not when the race ended without dropping it."""
    def status(reason):
        st = _status(onnx=_runner([(8, 105.0, 0.2)]), onnx_optimized=_runner([(8, 100.0, 0.2)]))
        for _k, fs in st.formats.items():
            fs.runners["onnxruntime-cpu"].profile.results[0].raced = True
        st.formats["onnx-optimized"].runners["onnxruntime-cpu"].profile.reason = reason
        return st

    dropped = f"{racing.OUT}behind onnx on onnxruntime-cpu in each of the last 5 interleaved rounds"
    assert select_best(status(dropped), no_profile=False).separated is True
    tie = select_best(status("30 rounds left onnx, onnx-optimized not separated"), no_profile=False)
    assert tie.separated is False
    assert "not separated from onnx-optimized on onnxruntime-cpu in the race: 1.05x" in tie.note


def test_a_contender_the_race_dropped_ranks_below_its_leader_whatever_its_figure():
    """The race dropped onnx-optimized at 100/s; the leader raced on and, the machine loaded, its
    last windows read 97/s: best is still the leader (separated, its margin below 1), as is the
    pair the race worker tunes (race_job._best_pick)."""
    from types import SimpleNamespace as NS

    from navigator.execution.race_job import _best_pick

    st = _status(onnx=_runner([(8, 97.0, 0.2)]), onnx_optimized=_runner([(8, 100.0, 0.2)]))
    for fs in st.formats.values():
        fs.runners["onnxruntime-cpu"].profile.results[0].raced = True
    st.formats["onnx-optimized"].runners["onnxruntime-cpu"].profile.reason = f"{racing.OUT}slower than onnx"
    best = select_best(st, no_profile=False)
    assert (best.key, best.runner_up.key, best.separated, best.margin) == ("onnx", "onnx-optimized", True, 0.97)
    entries = [NS(name="onnx", key="onnx"), NS(name="opt", key="onnx-optimized")]
    records = {"onnx": {"results": [{"batch_size": 8, "throughput": 97.0, "raced": True}], "reason": None},
               "opt": {"results": [{"batch_size": 8, "throughput": 100.0, "raced": True}],
                       "reason": f"{racing.OUT}slower than onnx"}}
    assert _best_pick(entries, records, set()).key == "onnx"


def test_a_dropped_contender_ranks_below_the_pairs_the_race_kept_only():
    """Contenders the race dropped rank below every eligible pair it kept, capped at the lowest of
    those (ties at the cap go by their own figures); a pair no race measured (a resumed run's new
    format, a peer left out of the race) ranks by its figure; with the leader not eligible the
    dropped contenders rank by their own figures, not below the slower pair the race never
    measured (select_best and race_job._best_pick agree)."""
    from types import SimpleNamespace as NS

    from navigator.execution.race_job import _best_pick

    keys = racing.ranking([(97.0, "kept"), (100.0, "dropped"), (105.0, "dropped"), (60.0, ""), (120.0, "")])
    assert sorted(range(5), key=lambda i: keys[i], reverse=True) == [4, 0, 2, 1, 3]
    st = _status(onnx=_runner([(8, 97.0, 0.05)]), onnx_optimized=_runner([(8, 100.0, 0.05)]),
                 openvino=_runner([(8, 105.0, 0.05)]), tflite=_runner([(8, 60.0, 0.05)]))
    for key in ("onnx", "onnx-optimized", "openvino"):
        st.formats[key].runners["onnxruntime-cpu"].profile.results[0].raced = True
    for key in ("onnx-optimized", "openvino"):
        st.formats[key].runners["onnxruntime-cpu"].profile.reason = f"{racing.OUT}slower than onnx"
    best = select_best(st, no_profile=False)
    assert (best.key, best.runner_up.key, best.margin) == ("onnx", "openvino", 0.9238)
    line = best_line(best)
    assert "the race dropped openvino on onnxruntime-cpu (its figure, 105.0/s, froze when it left" in line
    assert "x ahead" not in line and "0.92x that" in line
    st.formats["onnx"].runners["onnxruntime-cpu"].verify.status = "failed"   # the leader is not eligible
    best = select_best(st, no_profile=False)
    assert (best.key, best.runner_up.key) == ("openvino", "onnx-optimized")
    entries = [NS(name=k, key=k) for k in ("onnx", "onnx-optimized", "openvino", "tflite")]
    records = {k: {"results": [{"batch_size": 8, "throughput": t, "raced": k != "tflite"}],
                   "reason": f"{racing.OUT}slower than onnx" if k in ("onnx-optimized", "openvino") else None}
               for k, t in (("onnx", 97.0), ("onnx-optimized", 100.0), ("openvino", 105.0), ("tflite", 60.0))}
    assert _best_pick(entries, records, set()).key == "onnx"
    assert _best_pick(entries, records, {"onnx"}).key == "openvino"


def test_an_unsettled_race_keeps_the_reason_a_contender_was_dropped_for():
    """Three contenders; c is dropped, a and b end the race unsettled (the round cap): c's profile
    still says it is out of the race and why, a's and b's say why the race did not settle."""
    from types import SimpleNamespace as NS

    from navigator.execution.race_job import _race_record

    entrants = _entrants(("a", 100.0, 0.05), ("b", 99.0, 0.05), ("c", 98.0, 0.05))
    result = race(entrants, _windows({"a": [100.0, 104.0, 96.0], "b": [101.0, 95.0, 103.0], "c": [60.0]}),
                  budget_s=100.0, clock=_clock(0.1), max_rounds=4)
    assert result.capped and entrants[2].out
    records = {}
    for e in entrants:
        entry = NS(entrant=e, io=None, record={"results": [{"batch_size": e.batch_size, "throughput": 1.0}],
                                               "phase": "screening", "stable": True, "reason": None})
        records[e.name] = _race_record(entry, result)
    assert racing.dropped(records["c"]["reason"]) and "separated from a" in records["c"]["reason"]
    assert records["a"]["reason"] == records["b"]["reason"] == result.reason and not racing.dropped(result.reason)


def test_contenders_within_two_percent_end_the_race_as_a_tie():
    """Two runners 1% apart with 4% window spreads: the range rule never separates them; after
    RACE_TIE_ROUNDS rounds the race ends, unsettled, and says it is a tie. 3% apart it goes on
    until the near rule ends it (the leader is ahead in the paired rounds)."""
    entrants = _entrants(("a", 100.0, 0.04), ("b", 99.0, 0.04))
    result = race(entrants, _windows({"a": [98.0, 102.0], "b": [97.0, 101.0]}), budget_s=100.0, clock=_clock(0.1))
    assert not result.settled and result.rounds == racing.RACE_TIE_ROUNDS
    assert "within 2% of each other" in result.reason and "a tie" in result.reason
    assert result.leader == "a" and entrants[0].out is None and entrants[1].out is None
    entrants = _entrants(("a", 100.0, 0.04), ("b", 97.0, 0.04))
    result = race(entrants, _windows({"a": [98.0, 102.0], "b": [99.0, 95.0]}), budget_s=100.0, clock=_clock(0.1))
    assert not result.settled and result.rounds == racing.RACE_NEAR_ROUNDS
    assert result.reason.startswith("a at most 5% behind b (paired over 10 interleaved rounds")


def test_the_near_rule_ends_a_race_only_when_the_leader_is_shown_within_five_percent():
    """Paired log ratios, mean less t standard errors: a leader 4% ahead ends
    the race after RACE_NEAR_ROUNDS rounds (ranges that overlap: never separated); the same gap on
    windows that swing 40% round by round bounds nothing (the race goes on to its budget)."""
    a, b = _entrants(("a", 104.0, 0.02), ("b", 100.0, 0.02))
    result = race([a, b], _windows({"a": [100.0, 108.0], "b": [102.0, 98.0]}), budget_s=100.0, clock=_clock(0.1))
    assert result.leader == "a" and result.rounds == racing.RACE_NEAR_ROUNDS and "at most 5% behind" in result.reason
    assert racing.near_bound(a, b) > 1.0 / 1.05 and racing.near_bound(b, a) < 1.0 / 1.05
    a, b = _entrants(("a", 104.0, 0.02), ("b", 100.0, 0.02))
    result = race([a, b], _windows({"a": [104.0, 62.4, 145.6], "b": [100.0, 140.0, 60.0]}), budget_s=5.0,
                  clock=_clock(0.1))
    assert "budget of 5 s ended the race" in result.reason and racing.near_bound(a, b) < 1.0 / 1.05
    short = _entrants(("a", 100.0, 0.02), ("b", 100.0, 0.02))
    for e in short:
        e.windows = [Window(batch_size=1, latencies=[0.01] * 10)] * (racing.RACE_NEAR_ROUNDS - 1)
    assert racing.near_bound(*short) is None    # too few rounds to bound anything


def test_a_lone_contender_needs_no_race():
    result = race(_entrants(("a", 100.0, 0.2)), lambda e: pytest.fail("no window needed"), budget_s=1.0)
    assert result.settled and result.leader == "a" and result.rounds == 0


# --------------------------------------------------------------------------- parallel jobs
def test_job_count():
    from navigator.pipeline.schedule import GIB, job_count

    auto = dict(explicit_memory_gb=None, size_bytes=10 << 20, no_race=False)
    assert job_count(None, **auto, cpu_count=8, memory_bytes=64 * GIB) == 8
    assert job_count(None, **auto, cpu_count=8, memory_bytes=4 * GIB) == 1            # 2 GiB floor per job
    big = auto | {"size_bytes": 2 * GIB}                                                 # 12 GiB per job
    assert job_count(None, **big, cpu_count=8, memory_bytes=64 * GIB) == 4
    assert job_count(None, **(auto | {"explicit_memory_gb": 16.0}), cpu_count=8, memory_bytes=64 * GIB) == 3
    assert job_count(3, **auto, cpu_count=1, memory_bytes=GIB) == 3                    # --jobs wins
    assert job_count(4, **(auto | {"no_race": True}), cpu_count=8, memory_bytes=64 * GIB) == 1


def test_job_count_leaves_the_cores_other_processes_use():
    from navigator.pipeline.schedule import GIB, job_count

    auto = dict(explicit_memory_gb=None, size_bytes=10 << 20, no_race=False, memory_bytes=64 * GIB)
    assert job_count(None, **auto, cpu_count=2, machine_cores=2, busy_cores=0.1) == 2
    assert job_count(None, **auto, cpu_count=2, machine_cores=2, busy_cores=1.9) == 1
    assert job_count(None, **auto, cpu_count=2, machine_cores=2, busy_cores=5.0) == 1   # at least one
    assert job_count(None, **auto, cpu_count=8, machine_cores=8, busy_cores=2.6) == 5
    assert job_count(2, **auto, cpu_count=2, machine_cores=2, busy_cores=2.0) == 2      # --jobs wins
    # a convert-many build given 4 of a node's 32 cores (OMP_NUM_THREADS), 7 others' builds beside it:
    # its own share is still free
    assert job_count(None, **auto, cpu_count=4, machine_cores=32, busy_cores=28.0) == 4


def test_cpu_use_sets_this_process_tree_apart():
    """Others' share is the cores' busy time less this process tree's, per second; a real sample
    reads /proc (its figure depends on the machine, so only its range is checked)."""
    import subprocess
    import sys

    from navigator.machine import CpuUse
    from navigator.pipeline.schedule import cores

    assert CpuUse(10.0, 100.0, 5.0).others_since(CpuUse(8.0, 97.0, 4.0)) == 1.0      # 3 s busy, 1 ours, 2 s
    assert CpuUse(10.0, 100.0, 9.0).others_since(CpuUse(8.0, 99.0, 4.0)) == 0.0      # never below 0
    assert CpuUse(8.01, 1.0, 0.0).others_since(CpuUse(8.0, 0.0, 0.0)) is None         # too short to tell
    before = CpuUse.now()
    child = subprocess.run([sys.executable, "-c", "sum(range(3_000_000))"], check=True)
    after = CpuUse.now()
    assert child.returncode == 0 and after.ours_s > before.ours_s        # the reaped child counts as ours
    others = after.others_since(before)
    assert others is None or 0.0 <= others <= cores() + 1.0   # + the clock ticks rounding


def test_a_worker_counts_its_runs_calling_process_as_its_own():
    """A worker reads the load with its run's calling process as the root of "ours" (the race worker
    passes Job.parent_pid): a child process sampling around CPU work of its parent (this test) counts
    that work as its own with this process as root, not without. CPU accounting, not timing: the
    difference is the parent's CPU time over the span, whatever the machine's load. A root that is
    gone reads as unknown."""
    import os
    import subprocess
    import sys

    from navigator.machine import CpuUse

    code = ("import sys\nfrom navigator.machine import CpuUse\nroot = int(sys.argv[1])\n"
            "a, b = CpuUse.now(), CpuUse.now(root)\nprint('go', flush=True)\nsys.stdin.readline()\n"
            "a2, b2 = CpuUse.now(), CpuUse.now(root)\nprint(a2.ours_s - a.ours_s, b2.ours_s - b.ours_s)")
    child = subprocess.Popen([sys.executable, "-c", code, str(os.getpid())], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "go"
    t0 = time.process_time()
    sum(range(20_000_000))              # this process's CPU while the child waits
    spent = time.process_time() - t0
    out, _ = child.communicate("done\n", timeout=60)
    own, rooted = (float(x) for x in out.split())
    assert abs((rooted - own) - spent) <= 0.05 + 0.1 * spent, (own, rooted, spent)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert CpuUse.now(int(gone.stdout)).ours_s == -1.0
    assert CpuUse.now(int(gone.stdout)).others_since(CpuUse.now(int(gone.stdout))) is None


# --------------------------------------------------------------------------- progress
def test_a_long_step_reports_its_elapsed_time():
    """A step opened 100 s ago gets a progress line with its elapsed time; a fresh one does not."""
    import time
    from types import SimpleNamespace

    from navigator.pipeline.context import Parallel
    from navigator.pipeline.progress import Heartbeat

    lines = []
    reporter = SimpleNamespace(progress=lambda key, stage, runner, s: lines.append((key, stage, runner, round(s))))
    now = time.monotonic()
    steps = {("torch", "verify", "torch_compile-cpu"): now - 100.0, ("onnx", "convert", None): now}
    ctx = SimpleNamespace(reporter=reporter, par=Parallel(open_steps=steps))
    with Heartbeat(ctx, every_s=15.0, tick_s=0.01):
        deadline = time.monotonic() + 5.0
        while not lines and time.monotonic() < deadline:
            time.sleep(0.01)
    assert lines and lines[0][:3] == ("torch", "verify", "torch_compile-cpu") and lines[0][3] >= 100
    assert all(line[0] == "torch" for line in lines)


def test_the_pair_tuned_is_the_one_best_picks():
    """race_job._best_pick: the highest peak, a raced figure before a higher screening one, among the
    formats a server runs as verified (OpenVINO refused where its default precision failed)."""
    from types import SimpleNamespace as NS

    from navigator.execution.race_job import _best_pick

    entries = [NS(name="onnx on ort", key="onnx"), NS(name="ov on ov", key="openvino"),
               NS(name="opt on ort", key="onnx-optimized")]
    records = {"onnx on ort": {"results": [{"batch_size": 8, "throughput": 90.0, "raced": True},
                                           {"batch_size": 4, "throughput": 95.0}]},
               "ov on ov": {"results": [{"batch_size": 8, "throughput": 120.0, "raced": True}]},
               "opt on ort": {"results": [{"batch_size": 8, "throughput": 92.0}]}}
    assert _best_pick(entries, records, set()).key == "openvino"
    assert _best_pick(entries, records, {"openvino"}).key == "onnx-optimized"   # 92 screened > 90 raced
    assert _best_pick(entries, {}, set()) is None


def test_the_gain_is_paired_over_the_rounds_both_raced():
    """The defaults leave a tuning race at round 3 (2 ms a batch against the winner's 1 ms); the winner
    races a third candidate on, and the load rises: its last windows run at 3 ms. The gain is 2.0, from
    the rounds both ran, not 0.67 from the winner's last windows against the defaults' figure."""
    from navigator.execution.racing import paired_gain

    win, base = _entrants(("win", 0.0, None), ("defaults", 0.0, None))
    fast, slow = Window(batch_size=4, latencies=[0.001] * 10), Window(batch_size=4, latencies=[0.003] * 10)
    win.windows = [fast] * 3 + [slow] * 6
    base.windows = [Window(batch_size=4, latencies=[0.002] * 10)] * 3
    assert paired_gain(win, base) == pytest.approx(2.0) and win.figure()[0] / base.figure()[0] < 1.0
    assert paired_gain(win, _entrants(("none", 0.0, None))[0]) is None


def test_a_stop_ends_the_race_unsettled_with_its_reason():
    """``stop`` (the tuning's load watch) is asked after each round: its reason ends the race there,
    unsettled, though the windows would have separated the contenders at round 3."""
    asked = []

    def stop():
        asked.append(1)
        return "other processes kept 1.0 cores busy" if len(asked) == 2 else None

    result = race(_entrants(("a", 100.0, 0.2), ("b", 95.0, 0.2)),
                  _windows({"a": [120.0, 121.0, 119.0], "b": [100.0, 101.0, 99.0]}), budget_s=100.0,
                  clock=_clock(0.1), stop=stop)
    assert result.stopped and not result.settled and result.rounds == 2
    assert result.reason == "other processes kept 1.0 cores busy"


def test_the_tuning_stops_for_a_load_over_two_spans_in_a_row_and_stays_stopped(monkeypatch):
    """The load watch samples once a span has passed (spans of 0 s here) and fires only when two
    spans in a row read loaded -- one short process is not a load -- then keeps firing without
    reading again. The machine's load: a test double of ``busy_cores`` (real processes could not be
    timed to the sample)."""
    from navigator.execution import profiling, tuning

    readings = iter([None, 1.0, None, 0.8, 1.2, None, None])
    monkeypatch.setattr(profiling, "LOAD_SAMPLE_S", 0.0)
    monkeypatch.setattr(profiling, "busy_cores", lambda since, now=None: next(readings))
    watch = tuning.LoadWatch()
    said = [watch() for _ in range(7)]
    assert said[:4] == [None] * 4 and watch.busy == 1.2
    assert said[4:] == ["other processes kept 1.2 cores busy"] * 3
    assert next(readings) is None and next(readings) is None   # not read again once it fired


def test_a_window_rewarms_for_the_longest_spin_among_the_runners_it_alternates_with():
    """onnxruntime's idle spin is capped at 1 ms where it is measured, torch's threads spin ~10 ms:
    windows among onnxruntime sessions only re-warm 5 ms, any torch runner or live module (None) among
    them brings back 20 ms."""
    from navigator.execution.profiling import REWARM_S, rewarm_for

    assert rewarm_for(["onnxruntime"]) == rewarm_for(["onnxruntime", "onnxruntime"]) == 0.005
    assert rewarm_for(["onnxruntime", "torchscript"]) == rewarm_for([None, "onnxruntime"]) == REWARM_S == 0.02
    assert rewarm_for([]) == REWARM_S


def test_a_race_without_the_near_rule_goes_on():
    """The tuning's races keep the defaults when unsettled, so the near rule (which ends a race
    unsettled) is off there: the same 4% lead that ends a race after 10 rounds runs to the budget."""
    a, b = _entrants(("a", 104.0, 0.02), ("b", 100.0, 0.02))
    result = race([a, b], _windows({"a": [100.0, 108.0], "b": [102.0, 98.0]}), budget_s=3.0, clock=_clock(0.1),
                  near=False)
    assert result.rounds > racing.RACE_NEAR_ROUNDS and "budget of 3 s ended the race" in result.reason


def test_kept_options_keep_a_raced_peak_comparable_with_the_race():
    """The tuning's windows run after the race, at another moment: under load its own figure for the
    kept options (800/s) fell below the runner-up's raced one (1,100/s) and best picked the pair the
    race had beaten. The kept options' figure is the raced one times the gain measured against the
    defaults in the same interleaved rounds; a peak that was not raced keeps the measured figure."""
    from navigator.execution.tuning import merged

    found = {"options": {"intra_op_num_threads": 1}, "gain": 1.3, "reason": "separated",
             "figure": {"batch_size": 16, "throughput": 800.0, "spread": 0.02, "latency_ms": {"p50": 20.0}},
             "defaults": {"throughput": 615.0}}
    raced = {"reason": "won the race", "results": [
        {"batch_size": 8, "throughput": 900.0}, {"batch_size": 16, "throughput": 1200.0, "raced": True, "io": "host"}]}
    out = merged(raced, found)
    peak = next(r for r in out["results"] if r.get("raced"))
    assert peak["batch_size"] == 16 and peak["throughput"] == pytest.approx(1560.0)   # ahead of 1,100 again
    assert peak["latency_ms"] == {"p50": 20.0} and peak["io"] == "host" and out["options"] == found["options"]
    assert "1.30x its defaults" in out["reason"] and "800/s measured at the tuning's moment" in out["reason"]
    assert "gain" not in out["tuning"] and "figure" not in out["tuning"]

    alone = merged({"reason": None, "results": [{"batch_size": 16, "throughput": 1200.0}]}, found)
    assert alone["results"] == [{**found["figure"], "io": None}]
    assert alone["reason"] == "runtime options intra_op_num_threads=1 kept (1.30x its defaults, interleaved)"

    defaults_stay = merged(raced, {"reason": "the defaults won", "defaults": {"throughput": 1.0}})
    assert defaults_stay["results"] == raced["results"] and "options" not in defaults_stay


def test_options_with_fewer_threads_climb_only_to_larger_batches():
    """A kept thread count favours larger batches: from batch 16 of at most 64 the climb races 32,
    then 64, never 8; at 64 already it races nothing. Other options (onnxruntime's parallel mode)
    race both neighbours. Windows: a test double, 1 ms a call whatever the batch size."""
    from navigator.execution.tuning import FEWER_THREADS, climb

    def run(start: int, up_only: bool) -> tuple[list[int], int]:
        sizes = []

        def window(infer, feed):
            sizes.append(feed["n"])
            return [0.001] * 5

        here = Entrant(name=f"batch {start}", batch_size=start, screen_throughput=start * 1000.0, screen_spread=0.0)
        won, _, _ = climb(lambda feed: None, here, lambda n: {"n": n}, 64, 60.0, window, up_only=up_only)
        return sorted(set(sizes)), won.batch_size

    assert {"intra_op_num_threads"} <= FEWER_THREADS and "execution_mode" not in FEWER_THREADS
    assert run(16, True) == ([16, 32, 64], 64)
    assert run(64, True) == ([], 64)
    assert 8 in run(16, False)[0]
