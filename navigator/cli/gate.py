"""navigator gate WS|DIR|MODEL --policy gate.yaml: a model-release gate for CI.

WS is a workspace (or a workdir holding one). DIR, a workdir holding several
(navigator convert-many writes one per model), gates each of them with the
same policy: one JUnit file with a test suite per workspace, exit 1 when one
fails; its outputs: apply to the models that have them, and --baseline is then
the earlier run's workdir (workspaces matched by name). Given a MODEL instead
(an .onnx file), it runs `navigator convert` first with the policy's formats
as targets (the convert options below apply), then gates the result.

The policy (YAML) names the required formats, the comparison per output,
throughput and p99 bounds per format and a regression bound:

  require_formats: [onnx, onnx-optimized]
  outputs: {logits: {mode: tolerance, atol: 1.0e-4, rtol: 1.0e-3}}
  min_throughput: {onnx: 1000}          # or {onnx: {batch_size: 8, value: 1000}}
  max_p99_ms: {onnx: 5.0}               # same two forms
  max_regression: 0.05                  # against --baseline OLD_WS
  noise_margin: 0.03                    # optional: see below
  best: separated                       # separated | stable | warn (default) | any

Tolerances are re-checked on the stored outputs. Regression is compared only
when the two environments match (the packages the model's runners used,
else the check is skipped), beyond a noise margin: noise_margin when the
policy sets it, else 10% when either profile is unstable, else the sum of
the two profiles' window spreads (3% when one has none). `best:` decides what
an unsure pick does: separated fails an unmeasured, unstable or not-separated
pick, stable an unmeasured or unstable one, warn (default) shows it as a
skipped check, any ignores it. The result goes to <ws>/report/gate.json,
--junit (one test case per check) and --markdown. Exit 0 when every check
passes, 1 when one fails, 2 on bad input (a malformed policy).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from navigator.cli import convert as convert_cli     # the same convert options, kept in step


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.strip()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("target", metavar="WS|DIR|MODEL", help="workspace, workdir (every workspace in it), or a "
                                                               "model to convert")
    g = parser.add_argument_group("gate")
    g.add_argument("--policy", required=True, metavar="YAML", help="the gate policy")
    g.add_argument("--junit", metavar="XML", help="write a JUnit XML report (one test case per check)")
    g.add_argument("--markdown", metavar="MD", help="write a markdown summary (e.g. for $GITHUB_STEP_SUMMARY)")
    g.add_argument("--baseline", metavar="OLD_WS", help="workspace to compare throughput with (max_regression)")
    for group in convert_cli.GROUPS:
        group.add_to(parser)


def _is_workspace(path: Path) -> bool:
    from navigator.workspace.layout import SUFFIX

    if (path / "status.yaml").is_file():
        return True
    return path.is_dir() and any(c.name.endswith(SUFFIX) for c in path.iterdir())


def _convert(args: argparse.Namespace, policy, reporter) -> Path:
    """Run `navigator convert` with the policy's formats as targets; returns the workspace."""
    from navigator import config as config_mod
    from navigator.api import run_convert
    from navigator.sources import open_source

    options, config_path = convert_cli.options_from_args(args)
    base = config_mod.NavigatorConfig()
    if config_path:
        base = config_mod.from_mapping(config_mod.load_yaml(config_path), source=f"--config-path {config_path}")
    cfg = config_mod.from_mapping(options, base=base, source="command line")
    targets = list(cfg.targets or ())
    targets += [k for k in policy.formats if k not in targets]
    cfg = config_mod.from_mapping({"targets": targets}, base=cfg, source="gate policy")
    # a typo in the policy's outputs must not cost a whole conversion
    policy.check_outputs(open_source(args.target, cfg.model_format).signature.output_names)
    outcome = run_convert(args.target, None, cfg, reporter)
    reporter.summary(outcome.status, exit_code=outcome.exit_code, failures=outcome.failures,
                     timings=outcome.timings)
    return outcome.workspace.root


def run(args: argparse.Namespace) -> int:
    from navigator import console
    from navigator.errors import GateFailed, UserInputError
    from navigator.tools.gate import evaluate, load_policy

    policy = load_policy(args.policy)
    reporter = console.Reporter("quiet" if getattr(args, "quiet", False) else "auto")
    target = Path(args.target)
    if _is_workspace(target) or target.is_dir() and not (target / "saved_model.pb").is_file():
        ws_root = target          # Workspace.find says what is wrong with a folder that holds none
    elif target.is_file() or target.is_dir() or ":" in args.target:
        ws_root = _convert(args, policy, reporter)
    else:
        raise UserInputError(f"{target}: no such workspace, workdir or model")
    icons = console.ICONS if reporter.mode == "rich" else console.PLAIN
    status_icon = {"passed": icons["ok"], "failed": icons["failed"], "skipped": icons["skipped"]}
    if _several(ws_root):
        return _gate_workdir(args, policy, ws_root, reporter, status_icon)
    result = evaluate(ws_root, policy, baseline=args.baseline)
    gate_json = result.write(result.workspace, junit=args.junit, markdown=args.markdown)
    for c in result.checks:
        reporter.info(f"{status_icon[c.status]} {c.kind}: {c.name}: {c.message}")
    reporter.info(result.headline())
    reporter.info(f"report: {gate_json}" + (f", JUnit: {args.junit}" if args.junit else "")
                  + (f", markdown: {args.markdown}" if args.markdown else ""))
    if not result.passed:
        failed = result.failures
        raise GateFailed(f"gate failed: {len(failed)} of {len(result.checks)} checks failed; first: "
                         f"{failed[0].name}: {failed[0].message}"[:600])
    return 0


def _several(path: Path) -> bool:
    from navigator.workspace.layout import Workspace

    return path.is_dir() and not (path / "status.yaml").is_file() and len(Workspace.find_all(path)) > 1


def _gate_workdir(args: argparse.Namespace, policy, workdir: Path, reporter, status_icon: dict) -> int:
    """Every workspace of a workdir (navigator.tools.gate.workdir)."""
    from navigator.errors import GateFailed
    from navigator.tools.gate import evaluate_workdir

    result = evaluate_workdir(workdir, policy, baseline=args.baseline)
    result.write(junit=args.junit, markdown=args.markdown)
    for name, r in zip(result.names, result.results):
        reporter.info(f"{name}: {r.headline()}")
        for c in r.checks:
            if c.status != "passed":
                reporter.info(f"  {status_icon[c.status]} {c.kind}: {c.name}: {c.message}")
    reporter.info(result.headline())
    reporter.info("reports: <workspace>/report/gate.json" + (f", JUnit: {args.junit}" if args.junit else "")
                  + (f", markdown: {args.markdown}" if args.markdown else ""))
    if not result.passed:
        name, first = result.failures[0]
        failed = sum(not r.passed for r in result.results)
        raise GateFailed(f"gate failed: {failed} of {len(result.results)} workspaces failed; first: {name}: "
                         f"{first.name}: {first.message}"[:600])
    return 0
