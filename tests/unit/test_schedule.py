"""The parallel scheduler (navigator.pipeline.schedule.run_parallel) on its own: the formats'
``run_item`` is the test's, so what is checked is the order the scheduler starts them in."""

from __future__ import annotations

import threading
import types

import pytest

from navigator.pipeline.context import Parallel, RunContext
from navigator.pipeline.schedule import run_parallel


def _ctx(keys, jobs=2) -> RunContext:
    formats = {k: types.SimpleNamespace(convert=types.SimpleNamespace(status="pending")) for k in keys}
    return RunContext(config=None, ws=None, status=types.SimpleNamespace(formats=formats),
                      source=types.SimpleNamespace(obj=None), device="cpu", reporter=None, par=Parallel(jobs=jobs))


def _item(key, parent):
    return types.SimpleNamespace(key=key, parent=parent, converter=None if parent is None else object())


def test_a_child_starts_while_its_parent_is_still_verifying():
    """``onnx`` converts, then verifies; ``onnx-optimized`` (made from it) starts once ``onnx`` is
    converted, beside that verification -- which here waits for the child to start, so a
    scheduler that waited for the parent's whole job never starts the child (and the test fails
    after 10 s instead of hanging)."""
    ctx = _ctx(["src", "onnx", "onnx-optimized"])
    child_started = threading.Event()
    order = []

    def run_item(ctx, item, **how):
        order.append(item.key)
        if item.key == "onnx":
            ctx.status.formats["onnx"].convert.status = "ok"   # as its convert step's end event does
            ctx.par.converted.add("onnx")
            with ctx.par.unlocked():   # "verifying" in its worker: the others' threads go on meanwhile
                assert child_started.wait(10), "the child waited for its parent's verification"
        if item.key == "onnx-optimized":
            child_started.set()

    planned = [_item("src", None), _item("onnx", "src"), _item("onnx-optimized", "onnx")]
    run_parallel(ctx, planned, run_item)
    assert order == ["src", "onnx", "onnx-optimized"]


@pytest.mark.parametrize("status", ["failed", "skipped"])
def test_a_child_of_a_failed_conversion_waits_for_its_parent_to_end(status):
    """A parent whose conversion failed (a route from another format, converted again from the live
    module) is not ready for its children until its job ended."""
    ctx = _ctx(["src", "onnx", "onnx-optimized"])
    started = []

    def run_item(ctx, item, **how):
        if item.key == "onnx":
            ctx.status.formats["onnx"].convert.status = status
            ctx.par.converted.add("onnx")
            with ctx.par.unlocked():
                threading.Event().wait(0.3)   # the scheduler polls meanwhile (every 50 ms)
            started.append(("onnx ended", "onnx-optimized" in started))
        else:
            started.append(item.key)

    run_parallel(ctx, [_item("src", None), _item("onnx", "src"), _item("onnx-optimized", "onnx")], run_item)
    assert ("onnx ended", False) in started and started[-1] == "onnx-optimized"


def test_a_measurement_is_served_while_a_ready_item_waits_for_a_slot():
    """One slot (jobs=1): ``a`` hands a measurement to the scheduler's thread (as a live module's
    verification does) and holds its slot until it is done, while ``b`` is ready but has no slot.
    The scheduler must serve the measurement then, or neither ever ends."""
    ctx = _ctx(["src", "a", "b"], jobs=1)
    measured = threading.Event()

    def run_item(ctx, item, **how):
        if item.key == "a":
            with ctx.par.unlocked():
                ctx.par.on_caller(measured.set)

    done = threading.Event()

    def run() -> None:
        run_parallel(ctx, [_item("src", None), _item("a", "src"), _item("b", "src")], run_item)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(10), "the measurement was never served: the run hangs"
    assert measured.is_set()
