"""The configuration search (navigator.serving.search) on synthetic objectives:
the 5% stopping rule, brute search with its budget, hill-climbing, ranking under
constraints. No server: ``evaluate`` returns made-up measurements."""

from __future__ import annotations

import pytest

from navigator.serving.measure import Measurement
from navigator.serving.search import (
    Candidate,
    ConfigResult,
    Objective,
    Space,
    StopRule,
    brute,
    hill_climb,
    sweep_levels,
)


def meas(throughput: float, p99: float, concurrency: int = 1, errors: int = 0) -> Measurement:
    return Measurement(concurrency=concurrency, batch_size=1, throughput=throughput,
                       latency_ms={"p50": p99 / 2, "p99": p99}, windows=3, stable=True, errors=errors)


def result(cand: Candidate, throughput: float, p99: float = 1.0) -> ConfigResult:
    return ConfigResult(cand, measurements=[meas(throughput, p99)])


# --------------------------------------------------------------------------- stopping rule
@pytest.mark.parametrize("values, stop", [
    ([100, 200, 300], False),                 # still gaining
    ([100, 104], False),                      # too few steps to judge
    ([100, 104, 103], True),                  # two steps under +5%
    ([100, 104, 106], False),                 # the last one gained 6%
    ([100, 120, 121, 119], True),
    ([100, 90, 80], True),                    # falling
])
def test_stop_rule(values, stop):
    assert StopRule(min_gain=0.05, patience=2).should_stop(values) is stop


def test_stop_rule_patience():
    assert not StopRule(patience=4).should_stop([100, 101, 102, 103])
    assert StopRule(patience=4).should_stop([100, 101, 102, 103, 104])


# --------------------------------------------------------------------------- brute
def test_brute_stops_the_max_batch_sweep_when_gains_end():
    space = Space(instances=(1, 2), max_batch_sizes=(1, 2, 4, 8, 16, 32), delays_us=(0,))
    seen = []

    def evaluate(c):
        seen.append(c)
        return result(c, {1: 100, 2: 180, 4: 300, 8: 305, 16: 300, 32: 400}[c.max_batch_size] * c.instances)

    out = brute(space, evaluate, lambda: True)
    assert [c.max_batch_size for c in seen[:10] if c.instances == 1] == [1, 2, 4, 8, 16]   # the sweep stops
    assert seen[10:] == [Candidate(1, 32, 0), Candidate(2, 32, 0)]   # then what it passed over, with time left
    assert not out.skipped
    chosen = out.chosen(Objective())
    assert chosen.candidate == Candidate(2, 32, 0)   # the noisy plateau hid the best size
    budget = iter([True] * 10 + [False] * 5)
    seen.clear()
    out = brute(space, evaluate, lambda: next(budget))
    assert len(seen) == 10 and {s.candidate for s in out.skipped} == {Candidate(1, 32, 0), Candidate(2, 32, 0)}
    assert out.skipped[0].reason == "budget, after its max batch size sweep stopped at 16 (throughput gains < 5% " \
                                    "for 2 steps)"
    assert out.chosen(Objective()).candidate == Candidate(2, 8, 0)


def test_brute_records_what_the_budget_skipped():
    space = Space(instances=(1, 2), max_batch_sizes=(1, 2), delays_us=(0, 100))
    budget = iter([True, True, True] + [False] * 10)
    out = brute(space, lambda c: result(c, 100 * c.max_batch_size), lambda: next(budget))
    assert len(out.results) == 3
    assert len(out.skipped) == 5
    assert all(s.status == "skipped" and s.reason == "budget" for s in out.skipped)
    assert {s.candidate for s in out.skipped} | {r.candidate for r in out.results} == set(space.all())


# --------------------------------------------------------------------------- quick (hill-climbing)
def test_hill_climb_finds_the_peak_of_a_unimodal_objective_with_fewer_evaluations():
    space = Space(instances=(1, 2, 3, 4, 5), max_batch_sizes=(1, 2, 4, 8, 16, 32, 64), delays_us=(0, 100, 500))
    peak = (3, 16, 100)
    evaluated = []

    def evaluate(c):
        evaluated.append(c)
        i, b, d = space.instances.index(c.instances), space.max_batch_sizes.index(c.max_batch_size), \
            space.delays_us.index(c.delay_us)
        pi, pb, pd = space.instances.index(peak[0]), space.max_batch_sizes.index(peak[1]), \
            space.delays_us.index(peak[2])
        return result(c, 1000 - 50 * abs(i - pi) - 30 * abs(b - pb) - 20 * abs(d - pd))

    out = hill_climb(space, evaluate, lambda: True, Objective())
    assert out.chosen(Objective()).candidate == Candidate(*peak)
    assert len(evaluated) < space.size() / 2          # 105 configurations; the climb sees a fraction
    assert len(set(evaluated)) == len(evaluated)      # nothing measured twice


def test_hill_climb_stops_at_a_local_maximum_and_respects_the_budget():
    space = Space(instances=(1, 2, 3), max_batch_sizes=(1, 2, 4), delays_us=(0,))
    calls = {"n": 0}

    def has_time():
        calls["n"] += 1
        return calls["n"] <= 2

    out = hill_climb(space, lambda c: result(c, c.instances * c.max_batch_size), has_time, Objective())
    assert len(out.results) == 2
    assert out.skipped and all(s.reason == "budget" for s in out.skipped)


def test_hill_climb_on_latency_prefers_the_smaller_p99():
    space = Space(instances=(1, 2, 3), max_batch_sizes=(1,), delays_us=(0,))
    p99 = {1: 5.0, 2: 2.0, 3: 4.0}
    out = hill_climb(space, lambda c: result(c, 100, p99[c.instances]), lambda: True, Objective("p99_latency"))
    assert out.chosen(Objective("p99_latency")).candidate.instances == 2


# --------------------------------------------------------------------------- constraints and ranking
def test_ranking_puts_configurations_that_meet_the_constraints_first():
    objective = Objective("throughput", max_p99_ms=10.0)
    fast_but_slow_tail = ConfigResult(Candidate(2, 8), measurements=[meas(900, 50.0, 8)])
    meets = ConfigResult(Candidate(1, 4), measurements=[meas(500, 5.0, 2), meas(800, 12.0, 4)])
    failed = ConfigResult(Candidate(1, 8), status="failed", reason="did not load")
    from navigator.serving.search import SearchOutcome

    out = SearchOutcome(results=[fast_but_slow_tail, meets, failed])
    ranked = out.ranked(objective)
    assert [r.candidate for r in ranked] == [Candidate(1, 4), Candidate(2, 8)]     # failed ones are not ranked
    best, ok = objective.best(meets.measurements)
    assert ok and best.throughput == 500                   # the 800/s point breaks p99 <= 10 ms
    assert out.chosen(objective).candidate == Candidate(1, 4)


def test_none_is_chosen_when_no_configuration_meets_the_constraints():
    from navigator.serving.search import SearchOutcome

    objective = Objective("throughput", max_p99_ms=0.5, min_throughput=10)
    out = SearchOutcome(results=[result(Candidate(1, 1), 100, 2.0), result(Candidate(2, 1), 150, 3.0)])
    assert out.chosen(objective) is None
    assert [r.candidate.instances for r in out.ranked(objective)] == [2, 1]     # still ranked, for the report
    assert not objective.meets(meas(100, 0.4, errors=1))                        # errors never count


def test_concurrency_sweep_stops_on_gains_latency_and_budget():
    objective = Objective()
    thr = {1: 100, 2: 190, 4: 195, 8: 196, 16: 500}     # +2.6%, +3.2% over 190: stop before 16
    ms, why = sweep_levels([1, 2, 4, 8, 16], lambda c: meas(thr[c], c * 1.0, c), lambda: True, objective)
    assert [m.concurrency for m in ms] == [1, 2, 4, 8] and "gains" in why

    ms, why = sweep_levels([1, 2, 4, 8], lambda c: meas(100 * c, c * 3.0, c), lambda: True,
                                Objective(max_p99_ms=5.0))
    assert [m.concurrency for m in ms] == [1, 2] and "p99" in why

    ms, why = sweep_levels([1, 2, 4], lambda c: meas(100 * c, 1.0, c), iter([False] * 5).__next__, objective)
    assert len(ms) == 1 and why.startswith("budget")        # the first point is always measured


def test_candidate_names_and_space():
    assert Candidate(2, 8, 100).name == "i2_b8_d100"
    assert Candidate(1, 0, None).name == "i1_b0_nodb"
    assert Space((1, 2), (1, 4), (0, None)).size() == 8
    with pytest.raises(ValueError):
        Space((), (1,), (0,))


def test_brute_sweeps_advance_in_turn_so_a_short_budget_sees_every_instance_count():
    space = Space(instances=(1, 2, 3), max_batch_sizes=(1, 2, 4, 8), delays_us=(0,))
    budget = iter([True] * 4 + [False] * 20)
    out = brute(space, lambda c: result(c, 100 * c.max_batch_size), lambda: next(budget))
    assert [r.candidate.name for r in out.results] == ["i1_b1_d0", "i2_b1_d0", "i3_b1_d0", "i1_b2_d0"]
    assert len(out.skipped) == space.size() - 4



def test_adaptive_windows_fit_a_short_budget_and_the_minimum_useful_budget_is_stated(monkeypatch):
    """Without --measurement-ms each point gets its fair share of its configuration's share of the
    budget (250-2000 ms windows); with it, the window is what was asked. The minimum useful budget
    is what the brute search's first round (every instance count and delay once) takes."""
    from navigator.serving import budget
    from navigator.serving import profile as prof
    from navigator.serving.search import Space

    monkeypatch.setattr(budget.time, "monotonic", lambda: 1000.0)   # the clock stands still: no timing decides

    def run(measurement_ms=None, tool="navigator", share_s=4.0, points=5):
        r = prof.ServingRun(ws=None, st=None, opts=prof.ServingOptions(measurement_ms=measurement_ms), out=None,
                            scratch=None, levels=[1, 2, 4, 8, 16], tool=tool)
        r.config_deadline, r.points_left = 1000.0 + share_s, points
        return r

    assert budget.window_ms(run()) == 250                    # 0.8 s a point: the shortest window
    assert budget.window_ms(run(share_s=10.0)) == 500        # 2 s a point: (2 - 0.5) / 3
    assert budget.window_ms(run(share_s=100.0)) == 2000       # plenty: the default length
    assert budget.window_ms(run(measurement_ms=700)) == 700   # asked for: kept
    assert budget.window_ms(run(tool="perf_analyzer", share_s=25.0)) == 666   # (5 - its start 1) / 6 windows
    space = Space(instances=(1, 2), max_batch_sizes=(1, 2, 4), delays_us=(0,))
    need = budget.min_useful_budget(run(), space)
    assert need == pytest.approx(2 * 5 * (3 * 0.25 + 0.2 + 0.3) + budget.FINISH_RESERVE_S)
