"""navigator serve REPO: start a local Triton server on a model repository for a quick check.

The server is tritonserver 2.51 from the nvidia-pytriton 0.7.0 wheel (Python
backend only), or --tritonserver PATH, run from its own cached environment
(${NAVIGATOR_CACHE:-~/.cache/navigator}/triton-2.51: numpy<2 and the stub of
the Python backend; the project's packages stay untouched). It binds
127.0.0.1 only, uses explicit model control and loads every model of REPO
(or --models) through the repository API; a model that fails to load is
reported with the server's reason (exit 2). Ctrl-C stops it.

--cpu-backends serves native onnxruntime / openvino configs through
navigator's CPU stand-ins: Python-based backends that are test doubles of
NVIDIA's C++ backends, for a check on a laptop, not for deployment.

--prepare builds the cached environment (downloads the wheels once) and, with
no REPO, exits; CI runs `navigator serve --prepare` after installing.
REPO may also be a workspace, or a workdir holding one: its triton/ folder is served.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.strip()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("repo", metavar="REPO", nargs="?", help="Triton model repository (or a workspace)")
    parser.add_argument("--http-port", type=int, metavar="N", help="HTTP port (default: a free one)")
    parser.add_argument("--grpc-port", type=int, metavar="N", help="gRPC port (default: a free one)")
    parser.add_argument("--metrics-port", type=int, metavar="N", help="metrics port (default: a free one)")
    parser.add_argument("--tritonserver", metavar="PATH", help="this tritonserver binary instead of the bundled one")
    parser.add_argument("--models", metavar="A,B", help="load only these models (default: every model of REPO)")
    parser.add_argument("--cpu-backends", action="store_true",
                        help="serve onnxruntime/openvino configs through CPU stand-ins (test doubles)")
    parser.add_argument("--prepare", action="store_true",
                        help="build the cached server environment (downloads once); exits when no REPO is given")
    parser.add_argument("--log-file", metavar="PATH", help="keep the server's log here (default: a temporary file)")


def _repo(path: str) -> Path:
    from navigator.errors import UserInputError

    repo = Path(path)
    if not repo.is_dir():
        raise UserInputError(f"model repository {repo} is not a folder")
    if (repo / "status.yaml").is_file() and (repo / "triton").is_dir():
        repo = repo / "triton"
    elif not any(repo.glob("*/config.pbtxt")):   # a workdir holding one workspace: its repository
        from navigator.workspace.layout import SUFFIX, Workspace

        if any(c.name.endswith(SUFFIX) for c in repo.iterdir()):
            ws = Workspace.find(repo)
            if ws.triton_dir.is_dir():
                repo = ws.triton_dir
    # the server reads every file of a model it loads: a FIFO or a device there would hang the load
    for folder, _, files in os.walk(repo):
        for name in files:
            path = Path(folder) / name
            if not path.is_file() and not path.is_symlink():
                raise UserInputError(f"{path}: not a regular file; a model repository holds files and folders only")
    return repo


def run(args: argparse.Namespace) -> int:
    from navigator.console import Reporter
    from navigator.errors import UserInputError
    from navigator.triton import server as srv

    reporter = Reporter("quiet" if getattr(args, "quiet", False) else "auto")
    for flag in ("http_port", "grpc_port", "metrics_port"):
        port = getattr(args, flag)
        if port is not None and not 0 < port < 65536:
            raise UserInputError(f"--{flag.replace('_', '-')} {port} is not a port number (1-65535)")
    if args.repo is None and not args.prepare:
        raise UserInputError("navigator serve needs a model repository (REPO), or --prepare")
    repo = _repo(args.repo) if args.repo is not None else None
    t0 = time.monotonic()
    env = srv.prepare(quiet=getattr(args, "quiet", False))      # says so when it builds the cache
    if args.prepare:
        reporter.info(f"Triton {srv.TRITON_VERSION} server environment ready in {srv.cache_dir()} "
                      f"({time.monotonic() - t0:.1f} s)")
        reporter.info(f"  tritonserver:  {env.tritonserver}")
        reporter.info(f"  perf_analyzer: {env.perf_analyzer_command or env.perf_analyzer or 'not available'}")
        if repo is None:
            return 0
    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    server = srv.TritonServer(repo, http_port=args.http_port, grpc_port=args.grpc_port,
                              metrics_port=args.metrics_port, tritonserver=args.tritonserver,
                              cpu_backends=args.cpu_backends, models=models, log_path=args.log_file)

    def _terminate(signum, frame):
        raise KeyboardInterrupt

    # Ctrl-C and SIGTERM both stop the server (SIGINT explicitly: a shell's background job ignores it)
    previous = {sig: signal.signal(sig, _terminate) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.start()
        loaded = ", ".join(f"{m} ({server.load_s[m]:.1f} s)" for m in server.loaded) or "none"
        reporter.info(f"Triton {srv.TRITON_VERSION} serving {repo} (pid {server.process.pid}, live in "
                      f"{server.start_s:.1f} s)")
        reporter.info(f"  models:  {loaded}")
        reporter.info(f"  HTTP:    http://{server.http_url}")
        reporter.info(f"  gRPC:    {server.grpc_url}")
        reporter.info(f"  metrics: {server.metrics_url}")
        flags = server.config_flags()
        if flags:
            reporter.info(f"  flags:   {' '.join(flags)} (the configs ask for them)")
        if args.cpu_backends:
            reporter.info("  onnxruntime/openvino models run on navigator's CPU stand-ins (test doubles of "
                          "NVIDIA's backends)")
        reporter.info(f"  log:     {server.log_file}  (shm prefix {server.shm_prefix})")
        reporter.info("Ctrl-C stops the server")
        while server.process.poll() is None:
            time.sleep(0.2)
        code = server.process.returncode
        reason = server.log_reason()
        server.stop()
        raise UserInputError(f"tritonserver exited (exit {code}): {reason or 'no reason in its log'}")
    except KeyboardInterrupt:
        for sig in previous:                # a second Ctrl-C must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        server.stop()
        reporter.info("stopped")
        return 0
    finally:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
