"""navigator: convert a trained model to its fastest verified formats.

Exit codes: 0 ok; 1 a requested target failed (or a gate); 2 bad input;
3 internal error (traceback in navigator.log; --verbose shows it); 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import tempfile
import traceback

from navigator._version import __version__

# subcommand -> module under navigator.cli (imported only when chosen)
SUBCOMMANDS = {
    "convert": "Convert a model to verified, profiled formats and record them in a workspace.",
    "convert-many": "Convert the models of a manifest, in parallel on Ray (this machine or a cluster).",
    "status": "Print a workspace's status.yaml as a summary.",
    "triton": "Write a Triton model repository (config.pbtxt from the schema) from a workspace.",
    "serve": "Start a local Triton server on a model repository (127.0.0.1) for a quick check.",
    "gate": "Check a workspace (or a model, converted first) against a release policy; JUnit for CI.",
    "debug": "Find the first node of a format's graph whose output leaves tolerance.",
    "check-engine": "Read a TensorRT plan's builder version and say whether it loads in a Triton release.",
    "profile": "Measure the model served by a real Triton server and search its configuration (--triton).",
    "report": "Write the workspace report (summary.md, --html) from status.yaml and the serving profile.",
}



class _Parser(argparse.ArgumentParser):
    """Bad flags are bad input like any other: one ``error:`` line naming the command and
    ``--help``, exit 2 (argparse's default prints the whole usage block first)."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="navigator", description=__doc__.strip().splitlines()[0],
                                     epilog=" ".join(__doc__.strip().splitlines()[2:]))
    parser.add_argument("--version", action="version", version=f"navigator {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging and tracebacks")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only errors and the result line")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.set_defaults(_module=name)
        _add_arguments(name, p)
    return parser


def _add_arguments(name: str, parser: argparse.ArgumentParser) -> None:
    module = importlib.import_module(f"navigator.cli.{name.replace('-', '_')}")
    module.add_arguments(parser)


def _setup_logging(verbose: bool) -> None:
    """Records go to the workspace's navigator.log; the console gets them only with
    --verbose (otherwise the reporter's step lines and one error line say it all)."""
    logger = logging.getLogger("navigator")
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)


def _write_crash_log(text: str) -> str:
    """Where the traceback goes when no workspace log took it."""
    fd, path = tempfile.mkstemp(prefix="navigator-crash-", suffix=".log")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def main(argv: list[str] | None = None) -> int:
    from navigator.errors import NavigatorError

    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)          # argparse prints usage and exits 2 on bad flags
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    verbose = bool(getattr(args, "verbose", False))
    _setup_logging(verbose)
    from navigator.errors import Terminated, stop_on_sigterm

    if args.command != "serve":   # serve stops its server on SIGTERM itself
        stop_on_sigterm()
    try:
        module = importlib.import_module(f"navigator.cli.{args._module.replace('-', '_')}")
        return int(module.run(args) or 0)
    except NavigatorError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        if verbose:
            traceback.print_exc()
        return e.exit_code
    except KeyboardInterrupt as e:
        terminated = isinstance(e, Terminated)
        print("terminated" if terminated else "interrupted", file=sys.stderr)
        return 143 if terminated else 130
    except OSError as e:
        import errno

        if e.errno in (errno.ENOSPC, errno.EDQUOT):   # the machine's state, not a bug: nothing written is kept half
            where = f" writing {e.filename}" if e.filename else ""
            print(f"error: the disk is full{where} ({e.strerror or e}); free space or write elsewhere", file=sys.stderr)
            return 2
        if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            return _internal_error(e, verbose)
        # a read-only mount or a folder of another user: the user's setting, not a bug
        where = f" {e.filename}" if e.filename else ""
        print(f"error: cannot write{where}: {e.strerror or e} (a read-only or foreign folder? use another "
              "--workdir, or copy the workspace)", file=sys.stderr)
        return 2
    except Exception as e:
        return _internal_error(e, verbose)


def _internal_error(e: Exception, verbose: bool) -> int:
    text = "".join(traceback.format_exception(e))
    path = getattr(e, "navigator_log", None) or _write_crash_log(f"internal error in navigator {__version__}:\n{text}")
    print(f"internal error: {type(e).__name__}: {' '.join(str(e).split())[:300]} "
          f"(traceback in {path}; --verbose shows it)", file=sys.stderr)
    if verbose:
        print(text, file=sys.stderr)
    return 3


if __name__ == "__main__":
    raise SystemExit(main())
