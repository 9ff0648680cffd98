"""The worker's entry point: ``python -m navigator._worker JOB.json`` (see
:mod:`navigator.execution.worker`)."""

from navigator.execution.worker import main

if __name__ == "__main__":
    raise SystemExit(main())
