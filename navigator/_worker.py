"""The worker's entry point: ``python -m navigator._worker JOB.json`` (see
:mod:`navigator.execution.worker`). It ends with ``os._exit``: a thread a user's factory
started (not a daemon) must not keep a finished worker, and the run, waiting."""

import os
import sys

from navigator.execution.worker import main

if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
