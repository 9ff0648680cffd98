"""The model-release gate: a policy checked against a workspace.

A policy (YAML or a mapping) names the formats a release needs, how each
output must compare with the reference, throughput and p99 latency bounds
per format, and a regression bound against a baseline workspace:

    require_formats: [onnx, onnx-optimized]
    outputs: {logits: {mode: tolerance, atol: 1.0e-4, rtol: 1.0e-3}}
    min_throughput: {onnx: 1000}                        # at the best batch size
    max_p99_ms: {onnx: {batch_size: 8, value: 5.0}}     # or at a stated one
    max_regression: 0.05                                # with a baseline workspace
    noise_margin: 0.03                                  # optional, see below
    best: separated                                     # separated | stable | warn (default) | any

:func:`evaluate` turns it into one :class:`Check` per question asked (kinds:
``workspace``, ``format``, ``tolerance``, ``throughput``, ``latency``,
``regression``, ``best``). The ``best`` check reads status.yaml's ``best`` record
(:mod:`navigator.execution.racing`'s rule): ``best: separated`` fails an unmeasured,
unstable or not-separated pick, ``best: stable`` an unmeasured or unstable one; by
default (``warn``) an unsure pick is a *skipped* check naming why, so the gate shows it
without failing. Tolerance checks re-compare the outputs stored in
``formats/<key>/outputs/<runner>/`` with ``samples/reference/`` through the
same comparator as verification; they never trust the recorded maxima.
Outputs the policy does not name are re-compared with the rule recorded for
them in status.yaml.

Regression is compared only when the two workspaces' environment
fingerprints match (:data:`FINGERPRINT_KEYS`, and of :data:`FINGERPRINT_PACKAGES` those the
formats' runners used);
otherwise the check is skipped with the differing fields. A drop fails only
when it exceeds ``max_regression`` plus a noise margin: ``noise_margin`` from
the policy, else :data:`UNSTABLE_NOISE_MARGIN` (10%, the profiler's stability bound) when
either profile is recorded ``stable: false``; when both peaks record the
``spread`` of their repeated windows, the margin is the sum of the two spreads
(the noise each measurement showed), else 3%.

The result goes to ``<ws>/report/gate.json``; :class:`GateResult` also
renders JUnit XML (one test case per check) and a markdown summary.
"""

from __future__ import annotations

import os
from typing import Any

from navigator.errors import UserInputError
from navigator.tools.gate.policy import (DEFAULT_NOISE_MARGIN, FINGERPRINT_KEYS, FINGERPRINT_PACKAGES,
                                         UNSTABLE_NOISE_MARGIN, Bound, GatePolicy, load_policy)
from navigator.tools.gate.result import Check, GateResult


# --------------------------------------------------------------------------- evaluation
def _check_best(st, rule: str) -> Check | None:
    """How sure the best pick is, against the policy's ``best`` rule (module docstring)."""
    if rule == "any":
        return None
    b = st.best
    name = f"best pick is {'separated from the runner-up' if rule == 'separated' else 'stable'}"
    if rule == "warn":
        name = "best pick is sure (not required: policy best: warn)"
    if b is None:
        why, ok = "no best: no format was verified", False
    elif b.basis != "profile":
        why, ok = f"best {b.key} on {b.runner} was chosen by preference, not measured", False
    else:
        details_ok = b.stable is not False and (rule == "stable" or b.separated is not False)
        why, ok = (b.note or "measured, stable"
                   + (f", {b.lead()}" if b.lead() else "")), details_ok
    details = b.to_dict() if b is not None else {}
    if rule == "warn":
        return None if ok or b is None else Check("best", name, True, why, details, skipped=True)
    return Check("best", name, ok, why if ok else f"{'best ' + b.key + ': ' if b else ''}{why}", details)



def _fmt_num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _profiled(fs) -> list[tuple[str, Any]]:
    """(runner key, ProfileStep) of the runners that verified and profiled ``fs``."""
    return [(rk, rs.profile) for rk, rs in fs.runners.items()
            if rs.verify.status == "ok" and rs.profile.status == "ok" and rs.profile.results]


def _why_not_profiled(fs) -> str:
    if fs.convert.status != "ok":
        return f"not converted ({fs.convert.status}: {fs.convert.reason})"
    reasons = [f"{rk}: verify {rs.verify.status}, profile {rs.profile.status}"
               + (f" ({rs.profile.reason})" if rs.profile.status != "ok" and rs.profile.reason else "")
               for rk, rs in fs.runners.items()]
    return "no verified, profiled runner (" + ("; ".join(reasons) or "no runner") + ")"


def best_throughput(fs, batch_size: int | None = None) -> tuple[str, Any] | None:
    """(runner key, ProfileResult) with the highest throughput at one batch size, or over every
    runner's peak (a raced profile's peak is its race figure: ProfileStep.peak)."""
    found = []
    for rk, prof in _profiled(fs):
        if batch_size is None:
            found.append((rk, prof.peak()))
            continue
        found.extend((rk, r) for r in prof.results if r.batch_size == batch_size)
    return max(found, key=lambda x: x[1].throughput, default=None)


def _profiled_sizes(fs) -> list[int]:
    return sorted({r.batch_size for _, prof in _profiled(fs) for r in prof.results})


def _check_workspace(st) -> Check:
    ok = st.state == "complete"
    return Check("workspace", "workspace run complete", ok,
                 f"state {st.state}" + ("" if ok else ": the run did not finish; rerun navigator convert"),
                 {"state": st.state, "model": st.model.name})


def _check_format(st, key: str) -> Check:
    fs = st.formats.get(key)
    name = f"{key} converted and verified"
    if fs is None:
        return Check("format", name, False, f"{key} is not in the workspace (has: {', '.join(st.formats) or 'none'})")
    runners = {rk: rs.verify.status for rk, rs in fs.runners.items()}
    details = {"convert": fs.convert.status, "runners": runners}
    if fs.convert.status != "ok":
        return Check("format", name, False, f"convert {fs.convert.status}: {fs.convert.reason}", details)
    if fs.verified:
        return Check("format", name, True, ", ".join(f"{rk} verify {s}" for rk, s in runners.items()), details)
    bad = [f"{rk} verify {rs.verify.status}" + (f": {rs.verify.reason}" if rs.verify.reason else "")
           for rk, rs in fs.runners.items() if rs.verify.status != "ok"]
    return Check("format", name, False, "; ".join(bad) or "no runner verified it", details)


def _rule(st, key: str, runner_key: str, output: str, policy: GatePolicy, scale: float | None):
    """(OutputRule with an absolute atol, where it came from) for one output of one (format, runner)."""
    from navigator import formats
    from navigator.validators.tolerances import OutputRule, rule_for

    fs = st.formats[key]
    k = formats.parse_key(key)
    spec = st.signature.output(output)
    cfg = st.config or {}
    default = rule_for(output, spec.dtype, precision=k.precision, fmt=k.format, compare=cfg.get("compare"),
                       atol=cfg.get("atol"), rtol=cfg.get("rtol")).resolve(scale)
    recorded = fs.runners[runner_key].verify.outputs.get(output)
    if recorded is not None:
        default = OutputRule(mode=recorded.mode, atol=recorded.atol, rtol=recorded.rtol,
                             threshold=recorded.threshold)
    pol = policy.outputs.get(output)
    if pol is None:
        return default, "workspace"
    base = rule_for(output, spec.dtype, precision=k.precision, fmt=k.format).resolve(scale)
    return OutputRule(mode=pol.mode, atol=pol.atol if pol.atol is not None else base.atol,
                      rtol=pol.rtol if pol.rtol is not None else base.rtol, threshold=pol.threshold), "policy"


def _stored_pairs(ws, st, key: str, runner_key: str) -> list[tuple[str, Any, Any, dict, set | None]]:
    """(label, outputs, reference, wrong answers per output, the outputs compared or None for all)
    for every stored output file of one (format, runner): the comparisons verification made, with
    the same negative controls."""
    from navigator.execution.profiling import batch_of
    from navigator.execution.stages import batch_aligned
    from navigator.validators import controls
    from navigator.workspace import npz

    refs = {p.stem: p for p in ws.reference_files()}
    inputs = {p.stem: npz.load(p) for p in ws.input_files() if p.stem in refs}
    stems = list(refs)
    pairs = []
    for i, stem in enumerate(stems):
        reference = npz.load(refs[stem])
        feeds = inputs.get(stem, {})
        other_stem = next((stems[j] for j in list(range(i + 1, len(stems))) + list(range(i))
                           if {k: v.shape for k, v in inputs.get(stems[j], {}).items()}
                           == {k: v.shape for k, v in feeds.items()}), None)
        other = (inputs[other_stem], npz.load(refs[other_stem])) if other_stem else None
        full = ws.output_file(key, runner_key, stem)
        if full.is_file():
            pairs.append((f"sample {stem}", npz.load(full), reference,
                          controls.candidates(reference, feeds, batch_dim=st.batch_dim, other=other), None))
        if st.batch_dim is None or not feeds:
            continue
        aligned = batch_aligned(reference, st.batch_dim, next(iter(feeds.values())).shape[st.batch_dim])
        for size, path in ws.batch_outputs(key, runner_key, stem):
            cut = batch_of({k: reference[k] for k in aligned}, st.batch_dim, size)
            other_cut = tuple(batch_of(x, st.batch_dim, size) for x in other) if other else None
            pairs.append((f"sample {stem}, batch {size}", npz.load(path), cut,
                          controls.candidates(cut, batch_of(feeds, st.batch_dim, size), batch_dim=st.batch_dim,
                                              other=other_cut), aligned))
    return pairs


def _check_tolerances(ws, st, key: str, policy: GatePolicy) -> list[Check]:
    """Re-compare the stored outputs with the reference (never trusting the recorded maxima), each
    comparison with its negative controls: a check that could not fail fails the gate."""
    from polygraphy.logger import G_LOGGER

    from navigator.validators.numeric import Accumulator, compare_outputs
    from navigator.validators.tolerances import robust_magnitude

    fs = st.formats.get(key)
    if fs is None or fs.convert.status != "ok":
        return []
    checks: list[Check] = []
    cfg = st.config or {}
    for rk, rs in fs.runners.items():
        outputs = st.signature.output_names
        if rs.verify.status == "skipped":
            for name in outputs:
                checks.append(Check("tolerance", f"{key} [{rk}] {name}", True,
                                    f"runner not run here: {rs.verify.reason}", skipped=True))
            continue
        pairs = _stored_pairs(ws, st, key, rk)
        scales = {name: robust_magnitude([ref[name] for _, _, ref, _, _ in pairs if name in ref]) for name in outputs}
        rules = {name: _rule(st, key, rk, name, policy, scales[name]) for name in outputs}
        accs = {name: Accumulator(name, rule, batch_dim=st.batch_dim, scale=scales[name])
                for name, (rule, _) in rules.items()}
        if pairs:
            with G_LOGGER.verbosity(G_LOGGER.CRITICAL):    # Polygraphy prints a report per comparison
                for label, out, ref, cands, names in pairs:
                    compare_outputs(out, ref, accs, allow_nan=bool(cfg.get("allow_nan")),
                                    error_stat=cfg.get("error_stat") or "elemwise", where=f" ({label})",
                                    candidates=cands, names=names)
        for name in outputs:
            rule, origin = rules[name]
            cname = f"{key} [{rk}] {name}"
            if rule.mode == "skip":
                checks.append(Check("tolerance", cname, True, f"mode skip ({origin})", skipped=True))
                continue
            if not pairs:
                checks.append(Check("tolerance", cname, False,
                                    f"no stored outputs in {ws.rel(ws.outputs_dir(key, rk))} "
                                    f"(verify {rs.verify.status})"))
                continue
            c = accs[name].result()
            details = c.to_dict() | {"rule_from": origin, "comparisons": len(pairs)}
            bound = (f"atol {_fmt_num(rule.atol)} / rtol {_fmt_num(rule.rtol)}" if rule.mode == "tolerance"
                     else f"{rule.mode} {_fmt_num(rule.threshold)}" if rule.threshold is not None else rule.mode)
            if not c.passed:
                checks.append(Check("tolerance", cname, False, f"{c.reason} ({origin} rule: {bound})", details))
            elif c.conclusive is False:
                checks.append(Check("tolerance", cname, False, f"inconclusive: {c.control} ({origin} rule: {bound}); "
                                                               f"{c.cure}", details))
            else:
                measured = (f"max abs {_fmt_num(c.max_abs)} / max rel {_fmt_num(c.max_rel)}"
                            if c.measured is None else f"measured {_fmt_num(c.measured)}")
                checks.append(Check("tolerance", cname, True,
                                    f"{measured} within {bound} ({origin} rule, {len(pairs)} stored results; "
                                    "wrong answers rejected)", details))
    return checks


def _check_throughput(st, key: str, bound: Bound) -> Check:
    name = f"{key} throughput >= {bound.value:g}/s {bound.where()}"
    fs = st.formats.get(key)
    if fs is None:
        return Check("throughput", name, False, f"{key} is not in the workspace")
    found = best_throughput(fs, bound.batch_size)
    if found is None:
        sizes = _profiled_sizes(fs)
        why = (f"not profiled at batch {bound.batch_size} (profiled: {', '.join(map(str, sizes))})"
               if sizes else _why_not_profiled(fs))
        return Check("throughput", name, False, why)
    rk, r = found
    ok = r.throughput >= bound.value
    msg = f"{r.throughput:.1f}/s at batch {r.batch_size} on {rk}" + ("" if ok else f" < {bound.value:g}/s")
    return Check("throughput", name, ok, msg, {"runner": rk, "batch_size": r.batch_size,
                                                "throughput": r.throughput, "required": bound.value})


def _check_latency(st, key: str, bound: Bound) -> Check:
    name = f"{key} p99 latency <= {bound.value:g} ms {bound.where()}"
    fs = st.formats.get(key)
    if fs is None:
        return Check("latency", name, False, f"{key} is not in the workspace")
    if bound.batch_size is None:
        found = best_throughput(fs)       # the latency of the configuration a deployment would pick
    else:
        at = [(rk, r) for rk, prof in _profiled(fs) for r in prof.results
              if r.batch_size == bound.batch_size and r.latency_ms.get("p99") is not None]
        found = min(at, key=lambda x: x[1].latency_ms["p99"], default=None)
    if found is None:
        sizes = _profiled_sizes(fs)
        why = (f"not profiled at batch {bound.batch_size} (profiled: {', '.join(map(str, sizes))})"
               if bound.batch_size is not None and sizes else _why_not_profiled(fs))
        return Check("latency", name, False, why)
    rk, r = found
    p99 = r.latency_ms.get("p99")
    if p99 is None:
        return Check("latency", name, False, f"no p99 recorded for batch {r.batch_size} on {rk}")
    ok = p99 <= bound.value
    msg = f"p99 {p99:.4g} ms at batch {r.batch_size} on {rk}" + ("" if ok else f" > {bound.value:g} ms")
    return Check("latency", name, ok, msg, {"runner": rk, "batch_size": r.batch_size, "p99_ms": p99,
                                             "required": bound.value})


def fingerprint(environment: dict, packages_used: set[str] | None = None) -> dict:
    """The parts of status.yaml's environment that throughput depends on: the machine, and
    the versions of the runtimes in ``packages_used`` (None: every runtime we record)."""
    env = environment or {}
    packages = env.get("packages") or {}
    out = {k: env.get(k) for k in FINGERPRINT_KEYS}
    out.update({f"packages.{p}": packages.get(p) for p in FINGERPRINT_PACKAGES
                if packages_used is None or p in packages_used})
    return out


def fingerprint_differences(a: dict, b: dict, packages_used: set[str] | None = None) -> list[str]:
    fa, fb = fingerprint(a, packages_used), fingerprint(b, packages_used)
    return [f"{k}: {fb[k]!r} -> {fa[k]!r}" for k in fa if fa[k] != fb[k]]


def packages_used(statuses, keys) -> set[str] | None:
    """The runtimes that ran formats ``keys`` in any of ``statuses`` (their runners' packages):
    an ONNX model's regression check does not depend on torch's version. None when a runner is
    not known here (a plugin's): then every runtime counts."""
    from navigator.deps import display_name
    from navigator.runners import runner_class

    used: set[str] = set()
    for st in statuses:
        for key in keys:
            fs = st.formats.get(key)
            for rs in (fs.runners.values() if fs is not None else ()):
                try:
                    cls = runner_class(rs.runner)
                except UserInputError:
                    return None
                modules = (*cls.requires, *(m for m in (getattr(cls, "module", None),) if isinstance(m, str)))
                used.update(display_name(m) for m in modules)
    return used


def regression_margin(policy: GatePolicy, *profiles) -> tuple[float, str]:
    """(noise margin, how it was chosen); see the module docstring."""
    if policy.noise_margin is not None:
        return policy.noise_margin, "policy noise_margin"
    if any(p is not None and p.stable is False for p in profiles):
        return UNSTABLE_NOISE_MARGIN, "a profile is recorded stable: false"
    spreads = []
    for p in profiles:
        peak = p.peak() if p is not None else None
        spreads.append(peak.spread if peak is not None else None)
    if spreads and all(s is not None for s in spreads):
        # the two measurements' own noise: the spread of their repeated windows, added
        return round(sum(spreads), 4), "spread of the repeated profiling windows"
    return DEFAULT_NOISE_MARGIN, "default"


def _check_regressions(st, base, key: str, policy: GatePolicy, diffs: list[str]) -> Check:
    name = f"{key} throughput regression <= {policy.max_regression:.4g} vs baseline"
    if diffs:
        return Check("regression", name, True, "environments differ, not compared: " + "; ".join(diffs),
                     {"differences": diffs}, skipped=True)
    fs = st.formats.get(key)
    if fs is None or best_throughput(fs) is None:
        return Check("regression", name, False,
                     f"{key} " + ("is not in the workspace" if fs is None else _why_not_profiled(fs)))
    base_fs = base.formats.get(key)
    if base_fs is None or best_throughput(base_fs) is None:
        return Check("regression", name, True, f"the baseline has no profiled {key}", skipped=True)
    rk, now = best_throughput(fs)
    brk, then = best_throughput(base_fs)
    margin, why = regression_margin(policy, fs.runners[rk].profile, base_fs.runners[brk].profile)
    drop = 1.0 - now.throughput / then.throughput if then.throughput > 0 else 0.0
    allowed = policy.max_regression + margin
    ok = drop <= allowed
    change = f"{-drop * 100:+.1f}%"
    msg = (f"{now.throughput:.1f}/s ({rk}, batch {now.batch_size}) vs baseline {then.throughput:.1f}/s "
           f"({brk}, batch {then.batch_size}): {change}; allowed drop {allowed * 100:.1f}% "
           f"({policy.max_regression * 100:.1f}% + noise margin {margin * 100:.1f}%, {why})")
    return Check("regression", name, ok, msg, {"throughput": now.throughput, "baseline_throughput": then.throughput,
                                                "runner": rk, "baseline_runner": brk, "drop": round(drop, 6),
                                                "max_regression": policy.max_regression, "noise_margin": margin,
                                                "noise_margin_from": why})


def _same_model(st, base, where) -> None:
    """A baseline is an earlier run of the same model: its name and its interface (input and output
    names and dtypes). Another model's throughput says nothing about a regression of this one."""
    def interface(s):
        return ([(t.name, t.dtype) for t in s.signature.inputs], [(t.name, t.dtype) for t in s.signature.outputs])

    if base.model.name != st.model.name or interface(base) != interface(st):
        what = (f"model {base.model.name!r}, not {st.model.name!r}" if base.model.name != st.model.name
                else "another interface (input / output names or dtypes)")
        raise UserInputError(f"--baseline {where}: a workspace of {what}; a baseline is an earlier run of the same "
                             "model")


def evaluate(workspace: str | os.PathLike, policy: Any, *, baseline: str | os.PathLike | None = None) -> GateResult:
    """Check ``policy`` against a workspace (or a workdir holding one); never raises on a failed check."""
    from navigator.workspace import status as status_mod
    from navigator.workspace.layout import Workspace

    policy = load_policy(policy)
    ws = Workspace.find(workspace)
    st = status_mod.load(ws.status_path)
    policy.check_outputs(st.signature.output_names)
    base_ws = base = None
    if baseline is not None:
        if policy.max_regression is None:
            raise UserInputError(f"--baseline given but {policy.source} has no max_regression")
        base_ws = Workspace.find(baseline)
        base = status_mod.load(base_ws.status_path)
        _same_model(st, base, base_ws.root)
    checks = [_check_workspace(st)]
    for key in policy.formats:
        checks.append(_check_format(st, key))
    for key in policy.formats:
        checks.extend(_check_tolerances(ws, st, key, policy))
    for key, bound in policy.min_throughput.items():
        checks.append(_check_throughput(st, key, bound))
    for key, bound in policy.max_p99_ms.items():
        checks.append(_check_latency(st, key, bound))
    best = _check_best(st, policy.best)
    if best is not None:
        checks.append(best)
    if policy.max_regression is not None:
        if base is None:
            for key in policy.formats:
                checks.append(Check("regression", f"{key} throughput regression <= {policy.max_regression:.4g} "
                                    "vs baseline", True, "no baseline workspace given (--baseline)", skipped=True))
        else:
            diffs = fingerprint_differences(st.environment, base.environment,
                                            packages_used((st, base), policy.formats))
            for key in policy.formats:
                checks.append(_check_regressions(st, base, key, policy, diffs))
    return GateResult(checks=checks, workspace=str(ws.root), policy=policy.to_dict(),
                      baseline=str(base_ws.root) if base_ws else None, created=status_mod.now())
