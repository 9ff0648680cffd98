"""The trained corpus's held-out truth follows the rule Navigator's verdicts follow: a rate budget
met on fewer rows than can show it is no truth either way (benchmarks/trained_tasks.py)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import trained
        import trained_tasks
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return trained, trained_tasks


def test_a_budget_met_on_too_few_rows_is_unjudged():
    trained, T = _modules()
    assert T.within_budget("top1", {"top1": 1.0, "changed": "0/27"}) is None        # 300 rows show 0.99
    assert T.within_budget("top1", {"top1": 1.0, "changed": "0/300"}) is True
    assert T.within_budget("top1", {"top1": 0.96, "changed": "1/27"}) is False      # a miss shows on few rows
    assert T.within_budget("detection", {"det_f1": 0.97}) is True                   # no row count: as before
    row = {"verify": "failed", "task": {"top1": 1.0, "changed": "0/27", "within": None}}
    assert trained.classify(row) == "unjudged"
    row["task"]["within"] = True
    assert trained.classify(row) == "correct-but-failed"
