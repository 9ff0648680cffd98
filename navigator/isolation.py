"""Starting workers and watching them: per-stage timeouts, crashes, hangs.

A worker is ``python -m navigator._worker JOB.json`` in a new process group
(no multiprocessing, no fork: user scripts need no ``__main__`` guard). The
parent polls the job's events file; a stage running longer than the timeout
gets the process group killed (SIGTERM, then SIGKILL), and a worker that
dies without reporting a stage end leaves that stage ``failed`` with the
signal and the tail of its log.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

POLL_S = 0.05


@dataclass
class WorkerOutcome:
    returncode: int | None
    events: list[dict] = field(default_factory=list)
    open_stage: dict | None = None     # the stage running when the worker stopped, if any
    reason: str | None = None          # why it stopped early: timeout, signal, exit code
    log_tail: str = ""
    wall_s: float = 0.0


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        extra = " (a crash inside native code)" if name in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGABRT") else ""
        extra = " (killed: out of memory?)" if name == "SIGKILL" else extra
        return f"the worker died with {name}{extra}"
    return f"the worker exited with code {code}"


def run_worker(job: dict, job_path: Path, log_path: Path, *, stage_timeout_s: float,
               on_event: Callable[[dict], None] | None = None, env: dict | None = None) -> WorkerOutcome:
    """Run one job in a worker, calling ``on_event`` for each event as it comes."""
    events_path = Path(job["events"])
    events_path.parent.mkdir(parents=True, exist_ok=True)
    events_path.write_text("")
    job_path.parent.mkdir(parents=True, exist_ok=True)
    job_path.write_text(json.dumps(job, indent=1, default=str), encoding="utf-8")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    child_env["NAVIGATOR_WORKER"] = "1"
    start = time.monotonic()
    with open(log_path, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "navigator._worker", str(job_path)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                env=child_env)
    outcome = WorkerOutcome(returncode=None)
    stage_start = time.monotonic()
    open_stage: dict | None = None
    offset = 0
    buffer = ""
    try:
        while True:
            code = proc.poll()
            with open(events_path, encoding="utf-8") as f:
                f.seek(offset)
                chunk = f.read()
                offset = f.tell()
            buffer += chunk
            *lines, buffer = buffer.split("\n")
            for line in lines:
                if not line.strip():
                    continue
                event = json.loads(line)
                outcome.events.append(event)
                if event["event"] == "start":
                    open_stage, stage_start = event, time.monotonic()
                else:
                    open_stage = None
                if on_event:
                    on_event(event)
            if code is not None:
                outcome.returncode = code
                if open_stage is not None or code != 0:
                    outcome.reason = _describe_exit(code)
                break
            if open_stage is not None and time.monotonic() - stage_start > stage_timeout_s:
                _kill_group(proc)
                outcome.returncode = proc.returncode
                outcome.reason = (f"timed out after {stage_timeout_s:g} s in {open_stage['stage']} "
                                  f"(--timeout); the worker was killed")
                break
            time.sleep(POLL_S)
    except BaseException:
        _kill_group(proc)  # Ctrl-C or an error in the parent: never leave a worker behind
        raise
    outcome.open_stage = open_stage
    outcome.wall_s = time.monotonic() - start
    if outcome.reason:
        outcome.log_tail = log_tail(log_path)
    return outcome
