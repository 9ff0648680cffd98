"""The gate's answer: one :class:`Check` per question, and a :class:`GateResult` that
writes ``report/gate.json``, JUnit XML (one test case per check) and a markdown summary."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------- result
@dataclass
class Check:
    """One question the gate asked. ``skipped`` checks do not fail the gate."""

    kind: str
    name: str
    passed: bool
    message: str
    details: dict = field(default_factory=dict)
    skipped: bool = False

    @property
    def status(self) -> str:
        return "skipped" if self.skipped else ("passed" if self.passed else "failed")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "status": self.status, "passed": self.passed,
                "message": self.message, "details": self.details}


@dataclass
class GateResult:
    checks: list[Check]
    workspace: str
    policy: dict
    baseline: str | None = None
    created: str = ""

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def counts(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.checks) for s in ("passed", "failed", "skipped")}

    def headline(self) -> str:
        n = self.counts()
        verdict = "passed" if self.passed else "FAILED"
        return (f"gate {verdict}: {len(self.checks)} checks, {n['passed']} passed, {n['failed']} failed, "
                f"{n['skipped']} skipped")

    def to_dict(self) -> dict:
        return {"passed": self.passed, "created": self.created, "workspace": self.workspace,
                "baseline": self.baseline, "counts": self.counts(), "policy": self.policy,
                "checks": [c.to_dict() for c in self.checks]}

    # -- JUnit XML -----------------------------------------------------------
    def junit_xml(self) -> str:
        """``<testsuites><testsuite name="navigator-gate">`` with one test case per check."""
        return junit_document([self])

    def junit_suite(self, parent, *, model: str | None = None) -> None:
        """Append this result's ``<testsuite>`` to ``parent``; with ``model`` (several workspaces in
        one file) the suite is ``navigator-gate.<model>`` and its classes ``navigator.gate.<model>.<kind>``."""
        import xml.etree.ElementTree as ET

        n = self.counts()
        where = f".{model}" if model else ""
        suite = ET.SubElement(parent, "testsuite", name=_xml_safe(f"navigator-gate{where}"),
                              tests=str(len(self.checks)), failures=str(n["failed"]), skipped=str(n["skipped"]),
                              errors="0", time="0", timestamp=self.created)
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="workspace", value=_xml_safe(self.workspace))
        if self.baseline:
            ET.SubElement(props, "property", name="baseline", value=_xml_safe(self.baseline))
        for c in self.checks:
            case = ET.SubElement(suite, "testcase", classname=_xml_safe(f"navigator.gate{where}.{c.kind}"),
                                 name=_xml_safe(c.name), time="0")
            if c.skipped:
                ET.SubElement(case, "skipped", message=_xml_safe(c.message))
            elif not c.passed:
                failure = ET.SubElement(case, "failure", message=_xml_safe(c.message), type=c.kind)
                failure.text = _xml_safe(_details_text(c))
            else:
                out = ET.SubElement(case, "system-out")
                out.text = _xml_safe(c.message)

    # -- markdown --------------------------------------------------------------
    def markdown(self, *, title: str = "Navigator gate", level: int = 2) -> str:
        icons = {"passed": "✅", "failed": "❌", "skipped": "⏭️"}
        n = self.counts()
        lines = [f"{'#' * level} {title}: {'✅ passed' if self.passed else '❌ failed'}", "",
                 f"Workspace `{Path(self.workspace).name}`"
                 + (f", baseline `{Path(self.baseline).name}`" if self.baseline else "")
                 + f": {len(self.checks)} checks, {n['passed']} passed, {n['failed']} failed, "
                   f"{n['skipped']} skipped.", "",
                 "| | check | kind | result |", "|---|---|---|---|"]
        for c in self.checks:
            lines.append(f"| {icons[c.status]} | {_md(c.name)} | {c.kind} | {_md(c.message)} |")
        return "\n".join(lines) + "\n"

    def write(self, ws_root: str | os.PathLike, *, junit: str | os.PathLike | None = None,
              markdown: str | os.PathLike | None = None) -> Path:
        """``<ws>/report/gate.json`` (and the JUnit / markdown files when asked); returns gate.json's path."""
        import json

        from navigator.errors import UserInputError
        from navigator.workspace.atomic import write_text
        from navigator.workspace.layout import Workspace

        ws = Workspace(Path(ws_root))
        ws.check_no_links(below=ws.report_dir)
        write_text(ws.gate_report, json.dumps(self.to_dict(), indent=1, default=str) + "\n")
        for option, target, text in (("--junit", junit, self.junit_xml), ("--markdown", markdown, self.markdown)):
            if target is None:
                continue
            if Path(target).is_dir():
                raise UserInputError(f"{option} {target}: is a folder; give a file path")
            write_text(target, text())
        return ws.gate_report


def junit_document(results: list["GateResult"], names: list[str] | None = None) -> str:
    """One JUnit file: ``<testsuites>`` with one ``<testsuite>`` per result (``names``: the
    models, when there are several workspaces)."""
    import xml.etree.ElementTree as ET

    counts = [r.counts() for r in results]
    suites = ET.Element("testsuites", name="navigator", tests=str(sum(len(r.checks) for r in results)),
                        failures=str(sum(n["failed"] for n in counts)),
                        skipped=str(sum(n["skipped"] for n in counts)), errors="0")
    for i, r in enumerate(results):
        r.junit_suite(suites, model=names[i] if names else None)
    ET.indent(suites)
    text = '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    ET.fromstring(text.split("\n", 1)[1])     # it must parse: a CI report that does not is worse than none
    return text


_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_safe(text: Any) -> str:
    return _XML_BAD.sub("?", str(text))


def _md(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _details_text(c: Check) -> str:
    lines = [c.message]
    for k, v in c.details.items():
        lines.append(f"{k}: {v}")
    return "\n".join(lines)
