"""navigator report WS: (re)write WS/report/summary.md from status.yaml: the conversion
table (formats, verify, in-process profile), the best format and, when `navigator
profile --triton` ran, the serving tables, the chosen config.pbtxt and the plots.
--html also writes summary.html, one self-contained file (images embedded as base64).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.strip()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("workspace", metavar="WS", help="workspace, or workdir holding one")
    parser.add_argument("--html", action="store_true", help="also write summary.html (self-contained)")


def run(args: argparse.Namespace) -> int:
    from navigator.console import Reporter
    from navigator.serving import report
    from navigator.workspace import status as status_mod
    from navigator.workspace.layout import Workspace

    ws = Workspace.find(args.workspace)
    st = status_mod.load(ws.status_path)
    path = report.write(ws, st, html_too=args.html)
    reporter = Reporter("quiet" if getattr(args, "quiet", False) else "auto")
    reporter.info(f"report: {path}")
    if args.html:
        reporter.info(f"report: {path.with_suffix('.html')}")
    return 0
