"""navigator status WS: print a workspace's record as a summary table.

WS is a workspace folder or a workdir holding exactly one workspace.
``--yaml`` prints status.yaml itself.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workspace", metavar="WS", help="workspace, or workdir holding one")
    parser.add_argument("--yaml", action="store_true", help="print status.yaml as stored")


def run(args: argparse.Namespace) -> int:
    from navigator.console import Reporter
    from navigator.pipeline import outcome_code
    from navigator.workspace import status as status_mod
    from navigator.workspace.layout import Workspace

    ws = Workspace.find(args.workspace)
    st = status_mod.load(ws.status_path)
    if args.yaml:
        print(ws.status_path.read_text(encoding="utf-8"), end="")
        return 0
    reporter = Reporter("auto")
    reporter.info(f"workspace {ws.root}")
    reporter.info(f"model {st.model.name} ({st.model.source_format}), state {st.state}, updated {st.updated}")
    sig = st.signature
    for kind, specs in (("input", sig.inputs), ("output", sig.outputs)):
        for t in specs:
            reporter.info(f"  {kind} {t.name}: {t.dtype} {t.shape}")
    code, failures = outcome_code(st, list(st.formats))
    reporter.summary(st, exit_code=code, failures=failures)
    return 0
