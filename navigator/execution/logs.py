"""Where a stage's log records go: ``formats/<key>/<stage>.log`` beside the worker log."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path


class StageLog:
    """Send the records of one stage to ``formats/<key>/<stage>.log`` (and the worker log)."""

    def __init__(self, path: Path):
        self.path = path
        self.handler: logging.Handler | None = None

    def __enter__(self) -> StageLog:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handler = logging.FileHandler(self.path, mode="a", encoding="utf-8")
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(self.handler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.handler is not None:
            logging.getLogger().removeHandler(self.handler)
            self.handler.close()


# Libraries whose loggers print on stderr through a handler of their own (torch's on "torch"): the
# ONNX exporter's internals warn there at every export ("torchvision is not installed ...").
LIBRARY_LOGGERS = ("torch.onnx._internal",)


class _Forward(logging.Handler):
    def __init__(self, target: logging.Logger):
        super().__init__()
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        self.target.handle(record)


@contextlib.contextmanager
def library_logs_to_navigator() -> Iterator[None]:
    """While a job runs in the calling process, the :data:`LIBRARY_LOGGERS` records go to the run's
    log (through ``navigator.libraries``) instead of the user's terminal, as a worker's go to its log."""
    forward = _Forward(logging.getLogger("navigator.libraries"))
    saved = []
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.propagate))
        logger.addHandler(forward)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, propagate in saved:
            logger.removeHandler(forward)
            logger.propagate = propagate
