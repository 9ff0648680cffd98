"""--timeout for stages run on a thread of the calling process: the watch that raises
:class:`StageTimeout` in that thread, and the CPython call that raises it. Used by the
in-process jobs (:mod:`.dispatch`) and by the race's measurements (:mod:`.race`)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from navigator.execution.isolation import StageClock


@contextlib.contextmanager
def timeout_here(limit: float | None, clock: StageClock) -> Iterator[None]:
    """--timeout for stages run on this thread, timed by ``clock``: a watch thread
    raises :class:`StageTimeout` here (at the next bytecode) once a stage has been open longer than
    ``limit``; on leaving, it is stopped and a StageTimeout raised as the stage ended is cleared.
    ``clock``: an isolation.StageClock (an EventTail, or one window's own clock)."""
    from navigator.execution.isolation import POLL_S

    ident, stop = threading.get_ident(), threading.Event()

    def watch() -> None:
        while limit and not stop.wait(POLL_S):
            if clock.overdue(limit) is not None:
                async_raise_id(ident, StageTimeout)
                return

    watcher = threading.Thread(target=watch, name="navigator-measure-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        async_raise_id(ident, None)


class StageTimeout(BaseException):
    """Raised inside the thread of an in-process job whose stage ran past --timeout.
    A BaseException, so the stage's own ``except Exception`` does not turn it into an
    ordinary failure and the job stops where it is, as a killed worker would."""


IN_PROCESS_GRACE_S = 5.0   # how long a timed-out in-process stage gets to unwind before it is abandoned


def async_raise(thread: threading.Thread, exc_type: type[BaseException] | None) -> None:
    """Raise ``exc_type`` in ``thread`` at its next Python bytecode (CPython)."""
    if thread.ident is not None:
        async_raise_id(thread.ident, exc_type)


def async_raise_id(ident: int, exc_type: type[BaseException] | None) -> None:
    """Raise ``exc_type`` in the thread ``ident`` at its next bytecode; None clears a pending one."""
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident),
                                               ctypes.py_object(exc_type) if exc_type is not None else None)
