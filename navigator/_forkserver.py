"""The fork server's entry point: ``python -m navigator._forkserver CONTROL_FD PRELOAD_JSON``
(see :mod:`navigator.execution.forkserver`)."""

import os
import sys

from navigator.execution.forkserver_process import main

if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
