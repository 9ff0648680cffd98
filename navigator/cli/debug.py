"""navigator debug WS KEY: find where a format's numbers leave the reference.

Every intermediate tensor of the ONNX graph is marked as an output, on the
reference side (the workspace's ONNX source, run by onnxruntime with graph
optimisations disabled) and on KEY's side, both run on the stored samples;
tensors are matched by name and the nodes walked in topological order. The
first node whose output leaves tolerance is named with its op type, its
inputs and the error. KEY may be an ONNX format (onnx-optimized, onnx-fp16,
...) or openvino (its ops' outputs, matched by their ONNX tensor names);
for other formats the nearest ONNX parent is compared and the report says
so. Tolerances are the workspace's defaults for KEY's precision unless
--atol/--rtol are given. Written to <ws>/report/debug-KEY.json and printed.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.strip()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("workspace", metavar="WS", help="workspace, or workdir holding one")
    parser.add_argument("key", metavar="KEY", help="the format key to debug, e.g. onnx-optimized")
    parser.add_argument("--runner", metavar="R", help="runner key whose device KEY runs on, e.g. onnxruntime-cpu "
                                                      "(default: the first one that failed verification)")
    parser.add_argument("--atol", type=float, metavar="V", help="absolute tolerance for every tensor")
    parser.add_argument("--rtol", type=float, metavar="V", help="relative tolerance for every tensor")


def run(args: argparse.Namespace) -> int:
    from navigator.tools import debug
    from navigator.console import Reporter

    report = debug.debug_workspace(args.workspace, args.key, runner=args.runner, atol=args.atol, rtol=args.rtol)
    reporter = Reporter("quiet" if getattr(args, "quiet", False) else "auto")
    for line in debug.summary_lines(report):
        reporter.info(line)
    return 0
