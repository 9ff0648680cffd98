"""Converter plugins used by test_plugins.py: each misbehaves in one real way.

They are real converters run in real worker processes; only their
misbehaviour is planted."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time

from navigator.converters.base import Converter


class _Onnx(Converter):
    source = "onnx"
    requires = ("onnx",)


class Segfault(_Onnx):
    """Dies with SIGSEGV, as a native crash in a converter would."""

    name = "test_segfault"
    target = "onnx-crash"

    def convert(self, ctx):
        os.kill(os.getpid(), signal.SIGSEGV)


class ProgramToOnnxCrash(Converter):
    """An ExportedProgram -> ONNX edge whose worker dies with SIGSEGV, as a native crash in the
    exporter would; registered, it wins over the built-in torch_export_to_onnx."""

    name = "test_program_to_onnx_crash"
    source = "torch_export"
    target = "onnx"
    requires = ("torch",)

    def convert(self, ctx):
        os.kill(os.getpid(), signal.SIGSEGV)


class Hang(_Onnx):
    """Loops forever: the per-stage timeout must kill it."""

    name = "test_hang"
    target = "onnx-hang"

    def convert(self, ctx):
        while True:
            time.sleep(0.05)


class Balloon(_Onnx):
    """Allocates and touches memory without bound (64 MiB per step, every page
    written): the worker memory limit must kill it. Beside the memory it writes a
    line per GiB to its log, so a test can read how far it got."""

    name = "test_balloon"
    target = "onnx-balloon"

    def convert(self, ctx):
        import numpy as np

        hold = []
        while True:
            hold.append(np.ones(8 << 20))          # 64 MiB of float64, touched
            if len(hold) % 16 == 0:
                print(f"balloon: {len(hold) * 64} MiB", flush=True)


class Raises(_Onnx):
    """Raises a Python exception."""

    name = "test_raise"
    target = "onnx-raise"

    def convert(self, ctx):
        raise RuntimeError("planted converter failure")


class WrongNumbers(_Onnx):
    """Writes a model whose first float weight is perturbed by 1%: verification must catch it."""

    name = "test_wrong"
    target = "onnx-wrong"

    def convert(self, ctx):
        import numpy as np
        import onnx
        from onnx import numpy_helper

        model = onnx.load(str(ctx.source))
        for i, init in enumerate(model.graph.initializer):
            arr = numpy_helper.to_array(init)
            if arr.dtype == np.float32 and arr.size > 1:
                model.graph.initializer[i].CopyFrom(numpy_helper.from_array(arr * 1.01, init.name))
                break
        onnx.save(model, str(ctx.output))


class Copy(_Onnx):
    """A well-behaved plugin edge (copies the model)."""

    name = "test_copy"
    target = "onnx-copy"

    def convert(self, ctx):
        shutil.copyfile(ctx.source, ctx.output)


class Lineage(_Onnx):
    """Copies the model and writes, beside it, where its worker came from: its own and its parent's
    command line, the modules already imported as the conversion starts, its working directory."""

    name = "test_lineage"
    target = "onnx-lineage"

    def convert(self, ctx):
        import json
        import sys
        from pathlib import Path

        def cmdline(pid):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f.read().replace(b"\0", b" ").decode(errors="replace").strip()

        shutil.copyfile(ctx.source, ctx.output)
        facts = {"pid": os.getpid(), "ppid": os.getppid(), "cmdline": cmdline(os.getpid()),
                 "parent_cmdline": cmdline(os.getppid()), "cwd": os.getcwd(),
                 "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "polygraphy", "onnxruntime")),
                 "env": os.environ.get("NAVIGATOR_TEST_LINEAGE")}
        (Path(ctx.output).parent / "lineage.json").write_text(json.dumps(facts))


class KillsServer(_Onnx):
    """SIGKILLs the process that started its worker: under warm workers, the run's fork server."""

    name = "test_kills_server"
    target = "onnx-killserver"

    def convert(self, ctx):
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            if b"navigator._forkserver" not in f.read():   # never the run itself (a fresh worker's parent)
                raise RuntimeError("not a fork server's child")
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(30)   # dies with its server (PR_SET_PDEATHSIG) long before this ends


class NeedsMissingPackage(_Onnx):
    """Requires a package that is not installed: skipped, naming it, with reproduce.sh written."""

    name = "test_needs_missing"
    target = "onnx-missing"
    requires = ("onnx", "navigator_no_such_package")

    def convert(self, ctx):  # pragma: no cover - never runs here
        raise AssertionError("must not run without its package")


class WritesErfc(_Onnx):
    """Rewrites every Erf-based gelu of the source as tf2onnx writes Keras' exact gelu: ``Erfc(-x/sqrt2)``,
    an op no ONNX opset defines. The ONNX check repairs it exactly (Erfc = 1 - Erf)."""

    name = "test_writes_erfc"
    target = "onnx-erfc"

    def convert(self, ctx):
        import onnx
        from onnx import helper

        model = onnx.load(str(ctx.source))
        nodes = []
        for node in model.graph.node:
            if node.op_type == "Erf":   # Erf(x) -> 1 - Erfc(x), written as Neg(Erfc(x)) + 1 … kept exact:
                nodes += [helper.make_node("Erfc", list(node.input), [node.output[0] + "_c"], name=node.name + "_c"),
                          helper.make_node("Sub", ["one_f", node.output[0] + "_c"], list(node.output), name=node.name)]
            else:
                nodes.append(node)
        del model.graph.node[:]
        model.graph.node.extend(nodes)
        model.graph.initializer.append(onnx.numpy_helper.from_array(__import__("numpy").array(1.0, "float32"), "one_f"))
        onnx.save(model, str(ctx.output))


class WritesUndefinedOp(_Onnx):
    """Writes a graph whose first node uses an op no ONNX opset defines and nothing can repair:
    convert must fail naming the node and the op, not verify with a runtime error."""

    name = "test_writes_undefined"
    target = "onnx-undefined"

    def convert(self, ctx):
        import onnx

        model = onnx.load(str(ctx.source))
        model.graph.node[0].op_type = "Frobnicate"
        onnx.save(model, str(ctx.output))


class BrokenAtImport:  # referenced by an entry point that fails to load
    pass


raise_on_import = os.environ.get("NAV_TEST_PLUGIN_IMPORT_ERROR") == "1"
if raise_on_import:
    raise ImportError("planted plugin import error")


HANG_MODULE = """
import time
from navigator.converters.base import Converter
from navigator.converters.registry import register

@register
class Hang(Converter):
    name = "{name}"
    source = "onnx"
    target = "onnx-hang"
    requires = ("onnx",)

    def convert(self, ctx):
        while True:
            time.sleep(0.05)
"""


def write_hang_module(path, name: str) -> None:
    """A module registering a converter to ``onnx-hang`` that never ends, for a run a test interrupts
    or kills: imported by the run's script (a module, not ``__main__``, so it runs in a worker)."""
    path.write_text(HANG_MODULE.format(name=name))


@contextlib.contextmanager
def registered(*classes):
    """These converters in the registry for the block's duration (a test's fixture)."""
    from navigator.converters.registry import registry

    for cls in classes:
        registry.register(cls)
    try:
        yield
    finally:
        for cls in classes:
            registry.unregister(cls.name)
