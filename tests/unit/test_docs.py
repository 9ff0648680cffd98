"""The documentation keeps its word: the reference pages are what the parsers and the schema
give, every navigator command line in the docs parses, and the site builds with --strict
(every link and anchor resolves)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_pages_are_generated_from_the_parsers_and_the_schema():
    gen = _generator()
    for key, path in gen.PAGES.items():
        assert path.read_text(encoding="utf-8") == gen.RENDER[key](), \
            f"{path.relative_to(ROOT)} is stale: run python docs/gen_reference.py"


def test_the_cli_page_names_every_flag_of_every_command():
    from navigator.cli.main import SUBCOMMANDS, build_parser

    page = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and isinstance(a.choices, dict))
    for name in SUBCOMMANDS:
        section = page.split(f"## navigator {name}\n", 1)[1].split("\n## navigator ", 1)[0]
        for action in sub.choices[name]._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and action.help != "==SUPPRESS==" and flag != "--help":
                    assert f"`{flag}" in section, f"navigator {name} {flag} is missing from the CLI page"


def _documented_commands() -> list[tuple[str, str]]:
    """Every `navigator ...` line in the docs' and README's code blocks and code spans (synopses with
    [ ] or … left out)."""
    found = []
    for path in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        if path.parent.name == "reference":
            continue
        text = path.read_text(encoding="utf-8")
        blocks = re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, flags=re.S)
        spans = re.findall(r"(?<!`)`(navigator [^`\n]+)`(?!`)", re.sub(r"```.*?```", "", text, flags=re.S))
        for block in [*blocks, *spans]:
            for line in block.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ")
                line = re.sub(r"^(\.venv/bin/|\S*/)?navigator\b", "navigator", line)
                if not line.startswith("navigator ") or "[" in line or "…" in line or "..." in line:
                    continue
                found.append((str(path.relative_to(ROOT)), line.split(" #")[0].split(" &&")[0].split(" |")[0]
                              .rstrip(" &")))
    return found


def test_every_documented_command_line_parses():
    """A flag renamed or removed fails here, wherever the docs still use it."""
    from navigator.cli.main import build_parser

    commands = _documented_commands()
    assert len(commands) >= 40, commands
    bad = []
    for where, line in commands:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                build_parser().parse_args(shlex.split(line)[1:])
        except SystemExit:
            # prose may leave out a required argument; a flag or a choice the parser does not know is drift
            if re.search(r"unrecognized arguments|invalid choice|ambiguous option|not allowed with", err.getvalue()):
                bad.append(f"{where}: {line}: {err.getvalue().strip()}")
    assert not bad, "documented command lines that do not parse:\n" + "\n".join(bad)


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs is not installed (the docs extra: pip install -e '.[docs]')")
def test_the_site_builds_strict(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "site" / "getting-started" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()
