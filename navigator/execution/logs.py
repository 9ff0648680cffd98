"""Where a stage's log records go: ``formats/<key>/<stage>.log`` beside the worker log."""

from __future__ import annotations

import logging
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
