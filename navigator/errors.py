"""Navigator's error hierarchy.

Every error a user can cause derives from :class:`NavigatorError`. The CLI's
``main()`` maps each class to an exit code and prints one line; anything that
is not a ``NavigatorError`` is an internal bug (exit 3, traceback in
navigator.log, shown with ``--verbose``).
"""

from __future__ import annotations


import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# torch's advice appended to every compile/export error, not its cause
_BOILERPLATE = re.compile(
    r"Set TORCH_LOGS=[^\n]*|You can suppress this exception and fall back to eager.*?suppress_errors = True|"
    r"For more information about this error, see: \S+|To execute this test, run the following[^\n]*",
    re.DOTALL)


def plain_reason(text: str, limit: int = 500) -> str:
    """A failure's cause on one line: terminal colour codes and torch's standard advice removed,
    whitespace collapsed, at most ``limit`` characters."""
    text = _BOILERPLATE.sub(" ", _ANSI.sub("", str(text)))
    return " ".join(text.split())[:limit]


def error_text(e: BaseException, limit: int = 500) -> str:
    """``Type: message`` of an exception as one plain line (:func:`plain_reason`); a NavigatorError's
    hint (its cure) comes with it."""
    text = e.one_line() if isinstance(e, NavigatorError) else str(e)
    return plain_reason(f"{type(e).__name__}: {text}".strip(), limit)


class NavigatorError(Exception):
    """Base of every error Navigator raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = " ".join(str(self.message).split())
        if self.hint:
            text += f" ({' '.join(self.hint.split())})"
        return text


class UserInputError(NavigatorError):
    """Bad input: a missing file, a malformed spec, a bad option. Exit 2."""

    exit_code = 2


class WorkspaceBusy(UserInputError):
    """Another run holds the workspace lock. Exit 2."""


class DependencyMissing(UserInputError):
    """A package that the requested work needs is not installed. Exit 2."""

    def __init__(self, package: str, purpose: str, *, extra: str | None = None):
        hint = f"pip install 'navigator[{extra}]'" if extra else f"pip install {package}"
        super().__init__(f"{purpose} needs the package '{package}', which is not installed", hint=hint)
        self.package = package


class VerificationFailed(NavigatorError):
    """A requested target failed conversion or verification. Exit 1."""

    exit_code = 1


class GateFailed(NavigatorError):
    """A release-gate policy was not met. Exit 1."""

    exit_code = 1


class Interrupted(NavigatorError):
    """The run was stopped by SIGINT (exit 130) or SIGTERM (exit 143)."""

    exit_code = 130


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be: the run stops the same way (its
    workers stopped, the workspace recording ``interrupted``, convert-many's summary written)."""


def _on_sigterm(signum, frame):
    raise Terminated()


def stop_on_sigterm() -> None:
    """SIGTERM becomes :class:`Terminated` in the main thread (the CLI's processes), instead of an
    exit that leaves a workspace ``running``; no-op off the main thread."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


def stops_on_sigterm() -> bool:
    import signal

    return signal.getsignal(signal.SIGTERM) is _on_sigterm
