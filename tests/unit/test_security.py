"""The trust model's mechanical rules, checked over the source (docs/concepts/trust.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for folder in ("navigator", "converters", "validators", "workspace")
                 for p in (ROOT / folder).rglob("*.py"))

FORBIDDEN = {
    r"\byaml\.load\(": "yaml.safe_load only: yaml.load can build arbitrary objects",
    r"\byaml\.unsafe_load\(": "yaml.safe_load only",
    r"shell\s*=\s*True": "no shell=True: arguments go to subprocess as a list",
    r"allow_pickle\s*=\s*True": "npz files are read without pickle",
    r"\bpickle\.loads?\(": "no pickle: it runs code from the file",
    r"torch\.load\((?![^)]*weights_only\s*=\s*True)": "torch.load only with weights_only=True",
    r"(?<![\w.])eval\(": "no eval of strings",
    r"(?<![\w.])exec\(": "no exec of strings",
}


@pytest.mark.parametrize("pattern", list(FORBIDDEN))
def test_no_unsafe_loading(pattern):
    hits = []
    for path in SOURCES:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]   # comments may name what they avoid
            if re.search(pattern, code):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, f"{FORBIDDEN[pattern]}:\n" + "\n".join(hits)


def test_the_rules_can_fail(tmp_path):
    """Each pattern catches the line it is meant to catch."""
    bad = {r"\byaml\.load\(": "yaml.load(f)", r"shell\s*=\s*True": "run(cmd, shell=True)",
           r"allow_pickle\s*=\s*True": "np.load(p, allow_pickle=True)", r"\bpickle\.loads?\(": "pickle.loads(b)",
           r"torch\.load\((?![^)]*weights_only\s*=\s*True)": "torch.load(path)",
           r"(?<![\w.])eval\(": "x = eval(s)", r"(?<![\w.])exec\(": "exec(code)",
           r"\byaml\.unsafe_load\(": "yaml.unsafe_load(f)"}
    for pattern, line in bad.items():
        assert re.search(pattern, line), pattern
    assert not re.search(r"torch\.load\((?![^)]*weights_only\s*=\s*True)", "torch.load(p, weights_only=True)")
    assert not re.search(r"(?<![\w.])eval\(", "module.eval()")
