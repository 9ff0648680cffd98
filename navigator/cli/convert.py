"""navigator convert MODEL: export, convert, verify and profile a model.

MODEL is an .onnx file, a TensorFlow SavedModel directory, a TorchScript (.pt) or
ExportedProgram (.pt2) file, or path/to/file.py:factory (a function returning a
torch.nn.Module). The workspace lands in --workdir; status.yaml records
every step. Exit 0 when every requested target is ok (or skipped for a
missing package), 1 when one failed (0 with --allow-failures), 2 on bad input.
"""

from __future__ import annotations

import argparse

from navigator.cli.args import ModelArgs, ProfileArgs, ShapeArgs, TensorRTArgs, VerifyArgs

GROUPS = (ModelArgs(), ShapeArgs(), VerifyArgs(), ProfileArgs(), TensorRTArgs())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.strip()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("model", metavar="MODEL", help="path to the model")
    for group in GROUPS:
        group.add_to(parser)


def options_from_args(args: argparse.Namespace) -> tuple[dict, str | None]:
    options: dict = {}
    for group in GROUPS:
        options.update(group.options(args))
    return options, options.pop("config_path", None)


def run(args: argparse.Namespace) -> int:
    from navigator import config as config_mod
    from navigator.api import run_convert
    from navigator.console import Reporter

    options, config_path = options_from_args(args)
    base = config_mod.NavigatorConfig()
    if config_path:
        base = config_mod.from_mapping(config_mod.load_yaml(config_path), source=f"--config-path {config_path}")
    cfg = config_mod.from_mapping(options, base=base, source="command line")
    reporter = Reporter("quiet" if getattr(args, "quiet", False) else "auto")
    outcome = run_convert(args.model, None, cfg, reporter)
    reporter.summary(outcome.status, exit_code=outcome.exit_code, failures=outcome.failures, timings=outcome.timings)
    if outcome.exit_code and cfg.allow_failures:
        return 0
    return outcome.exit_code
