"""The worker's entry point: ``python -m navigator._worker JOB.json`` (see
:mod:`navigator.execution.worker`). The worker is the subreaper of what the job starts and kills
every descendant left when the job ends (a factory's helper, even one that double-forked into a
session of its own); it ends with ``os._exit``: a thread a user's factory started (not a daemon)
must not keep a finished worker, and the run, waiting."""

import os
import sys

from navigator.execution.processes import become_subreaper, kill_descendants
from navigator.execution.worker import main

if __name__ == "__main__":
    become_subreaper()
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    kill_descendants()
    os._exit(code)
