"""Running a stateful model over a sequence: the stored samples are its steps, in order, and each
step's state inputs are the state outputs of the step before (the first step's own, a zero state
unless the user gave one). The reference, the source's variation and every format replay it the
same way, each carrying its own state: an error that compounds over steps shows, and a format that
ignores its state is caught by the control: the reference replayed with its state reset halfway
must differ from the unreset one (else the state's effect was never checked).
"""

from __future__ import annotations

from typing import Callable, Iterator


def pairs_of(sequence: dict | None) -> list[tuple[str, str]]:
    """[(state input, state output)] of a VerifySpec's ``sequence`` record."""
    return [(p["input"], p["output"]) for p in (sequence or {}).get("pairs", [])]


def replay(infer: Callable[[dict], dict], steps: list[tuple[str, dict]], pairs: list[tuple[str, str]],
           reset_at: int | None = None) -> Iterator[tuple[str, dict, dict]]:
    """(stem, the feeds run, the outputs) per step, each step fed the state the step before returned;
    at ``reset_at`` the state goes back to the first step's (the control's replay)."""
    initial = {i: steps[0][1][i] for i, _ in pairs} if steps else {}
    state: dict | None = None
    for k, (stem, sample) in enumerate(steps):
        if k == reset_at:
            state = None
        feeds = dict(sample)
        feeds.update(state if state is not None else initial)
        outputs = infer(feeds)
        state = {i: outputs[o] for i, o in pairs if o in outputs}
        yield stem, feeds, outputs
