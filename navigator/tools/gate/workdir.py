"""The gate over every workspace of a workdir: ``navigator gate DIR --policy P`` where DIR holds
several workspaces (``navigator convert-many`` writes one per model).

The same policy is checked against each workspace (:func:`~navigator.tools.gate.evaluate.evaluate`),
each gets its own ``report/gate.json``, and one JUnit file holds one ``<testsuite>`` per workspace
(``navigator-gate.<model>``, test classes ``navigator.gate.<model>.<kind>``), so CI sees the zoo's
verdict in one report. The policy's ``outputs:`` apply to the workspaces whose model has that
output; an output that no model has is still an error (a typo). ``--baseline OLD_DIR`` is then a
workdir too: each workspace is compared with the workspace of the same name there, and its
regression checks are skipped, saying so, when there is none. The gate passes when every
workspace passes.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from navigator.errors import UserInputError
from navigator.tools.gate.policy import load_policy
from navigator.tools.gate.result import Check, GateResult, junit_document


@dataclass
class WorkdirGateResult:
    workdir: str
    names: list[str]
    results: list[GateResult]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def checks(self) -> list[Check]:
        return [c for r in self.results for c in r.checks]

    @property
    def failures(self) -> list[tuple[str, Check]]:
        return [(name, c) for name, r in zip(self.names, self.results) for c in r.failures]

    def headline(self) -> str:
        failed = sum(not r.passed for r in self.results)
        n = {s: sum(c.status == s for c in self.checks) for s in ("passed", "failed", "skipped")}
        return (f"gate {'passed' if self.passed else 'FAILED'}: {len(self.results)} workspaces ({failed} failed), "
                f"{len(self.checks)} checks, {n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped")

    def junit_xml(self) -> str:
        return junit_document(self.results, self.names)

    def markdown(self) -> str:
        lines = [f"## Navigator gate: {'✅ passed' if self.passed else '❌ failed'}", "",
                 f"Workdir `{Path(self.workdir).name}`: {self.headline()}.", ""]
        for name, r in zip(self.names, self.results):
            lines.append(r.markdown(title=name, level=3))
        return "\n".join(lines)

    def write(self, *, junit: str | os.PathLike | None = None, markdown: str | os.PathLike | None = None) -> list[Path]:
        """Each workspace's report/gate.json (and the one JUnit / markdown file when asked)."""
        from navigator.workspace.atomic import write_text

        paths = [r.write(r.workspace) for r in self.results]
        if junit:
            write_text(junit, self.junit_xml())
        if markdown:
            write_text(markdown, self.markdown())
        return paths


def evaluate_workdir(workdir: str | os.PathLike, policy: Any, *,
                     baseline: str | os.PathLike | None = None) -> WorkdirGateResult:
    """Check ``policy`` against every workspace of ``workdir`` (see the module docstring)."""
    from navigator.tools.gate.evaluate import evaluate
    from navigator.workspace import status as status_mod
    from navigator.workspace.layout import Workspace

    policy = load_policy(policy)
    spaces = Workspace.find_all(workdir)
    outputs = {ws.name: status_mod.load(ws.status_path).signature.output_names for ws in spaces}
    policy.check_outputs(sorted({n for names in outputs.values() for n in names}))
    old: dict[str, Workspace] = {}
    if baseline is not None:
        if policy.max_regression is None:
            raise UserInputError(f"--baseline given but {policy.source} has no max_regression")
        if (Path(baseline) / "status.yaml").is_file():
            raise UserInputError(f"--baseline {baseline}: a single workspace, but {workdir} holds {len(spaces)}; "
                                 "give the workdir of the earlier run")
        old = {ws.name: ws for ws in Workspace.find_all(baseline)}
    results = []
    for ws in spaces:
        mine = dataclasses.replace(policy, outputs={k: v for k, v in policy.outputs.items() if k in outputs[ws.name]})
        base = old.get(ws.name)
        result = evaluate(ws.root, mine, baseline=base.root if base else None)
        if baseline is not None and base is None:
            for c in result.checks:
                if c.kind == "regression":
                    c.message = f"no workspace {ws.name} in the baseline {baseline}"
        results.append(result)
    return WorkdirGateResult(workdir=str(Path(workdir).resolve()), names=[ws.name for ws in spaces], results=results)
