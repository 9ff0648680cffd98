"""The model-release gate (``navigator gate``): a policy checked against a workspace
(:mod:`~navigator.tools.gate.evaluate`), the policy itself
(:mod:`~navigator.tools.gate.policy`), the result with its reports
(:mod:`~navigator.tools.gate.result`), and every workspace of a workdir at once
(:mod:`~navigator.tools.gate.workdir`)."""

from navigator.tools.gate.evaluate import (best_throughput, evaluate, fingerprint, fingerprint_differences,
                                           regression_margin)
from navigator.tools.gate.policy import (DEFAULT_NOISE_MARGIN, UNSTABLE_NOISE_MARGIN, Bound, GatePolicy,
                                         OutputPolicy, load_policy, parse_policy)
from navigator.tools.gate.result import Check, GateResult
from navigator.tools.gate.workdir import WorkdirGateResult, evaluate_workdir

__all__ = ["evaluate", "best_throughput", "fingerprint", "fingerprint_differences", "regression_margin", "GatePolicy",
           "OutputPolicy", "Bound", "load_policy", "parse_policy", "DEFAULT_NOISE_MARGIN", "UNSTABLE_NOISE_MARGIN",
           "Check", "GateResult", "evaluate_workdir", "WorkdirGateResult"]
