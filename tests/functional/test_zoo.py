"""The model zoo's CI subset (benchmarks/zoo.py --subset ci) against committed expectations.

benchmarks/results/zoo_ci_expected.yaml lists, per model, format key and runner, the verify
status expected today. A (model, format, runner) expected ``ok`` that is not ok fails the
test; one expected ``failed`` that now passes is reported (print) so the file can be
tightened. The subset builds transformers models offline from their configs, so the test is
skipped when transformers is not installed. About 3-4 minutes on a 2-core CPU.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = ROOT / "benchmarks" / "results" / "zoo_ci_expected.yaml"

pytestmark = [pytest.mark.slow, pytest.mark.functional]

def _missing(pkg: str) -> bool:
    try:
        return importlib.util.find_spec(pkg) is None
    except (ImportError, ValueError):   # a None entry in sys.modules: treated as absent
        return True


_INSTALL = {"torch": "torch==2.13.0", "transformers": "'transformers==5.23.*'"}
for _pkg in ("torch", "transformers", "onnxruntime", "onnxscript"):
    if _missing(_pkg):
        pytestmark.append(pytest.mark.skip(reason=f"the model zoo needs the package {_pkg!r} "
                                                  f"(pip install {_INSTALL.get(_pkg, _pkg)})"))
        break


def _actual(records: list[dict]) -> dict:
    out: dict = {}
    for r in records:
        m = out.setdefault(r["model"], {})
        if r.get("error"):
            m["_error"] = r["error"]
        for key, f in (r.get("formats") or {}).items():
            if f["convert"]["status"] != "ok":
                m[key] = {"convert": f["convert"]["status"]}
                continue
            m[key] = {rn: rr["verify"]["status"] for rn, rr in f["runners"].items()}
    return out


def test_zoo_ci_subset_meets_expectations(tmp_path):
    expected = yaml.safe_load(EXPECTED.read_text())["models"]
    out_json = tmp_path / "zoo.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "zoo.py"), "--subset", "ci",
                           "--workdir", str(tmp_path / "zoo"), "--json", str(out_json), "--timeout", "500"],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = json.loads(out_json.read_text())["records"]
    actual = _actual(records)
    assert set(actual) == set(expected), f"CI subset {sorted(actual)} != expectations {sorted(expected)}"

    broken, improved = [], []
    for model, keys in expected.items():
        got = actual[model]
        assert "_error" not in got, f"{model}: {got['_error']}"
        for key, want in keys.items():
            have = got.get(key)
            if have is None:
                broken.append(f"{model} {key}: not in the run")
                continue
            if "convert" in want:     # expected convert status (no runner)
                if want["convert"] == "ok" and have.get("convert", "ok") != "ok":
                    broken.append(f"{model} {key}: convert {have.get('convert')}, expected ok")
                continue
            if "convert" in have:
                if any(v == "ok" for v in want.values()):
                    broken.append(f"{model} {key}: convert {have['convert']}, expected verify ok")
                continue
            for runner, status in want.items():
                now = have.get(runner)
                if status == "ok" and now != "ok":
                    broken.append(f"{model} {key} {runner}: verify {now}, expected ok")
                elif status != "ok" and now == "ok":
                    improved.append(f"{model} {key} {runner}: now ok (expected {status})")
    if improved:
        print("expected failures that now pass (tighten zoo_ci_expected.yaml):\n  " + "\n  ".join(improved))
    assert not broken, "\n".join(broken)

    # the corpus itself must stay informative: no output of a CI model may be ~constant
    for r in records:
        for name, s in (r.get("outputs") or {}).items():
            assert not s["degenerate"], (f"{r['model']}.{name} is degenerate "
                                         f"(max {s['max_abs']}, row std {s['row_std']})")
