"""The package's layers only point down: no import cycle among navigator's modules (imports
inside functions included, ``if TYPE_CHECKING:`` ones excluded), and no module imports a layer
above its own. Read from the source with ``ast``; nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the installed package's folders (pyproject's package-dir)
FOLDERS = {"navigator": ROOT / "navigator", "navigator.converters": ROOT / "converters",
           "navigator.validators": ROOT / "validators", "navigator.workspace": ROOT / "workspace"}
# a module of the left layer never imports one of the right layers
ABOVE = {
    "navigator.workspace": ("navigator.pipeline", "navigator.execution", "navigator.cli", "navigator.serving",
                            "navigator.triton", "navigator.many", "navigator.tools"),
    "navigator.validators": ("navigator.pipeline", "navigator.execution", "navigator.cli", "navigator.serving",
                             "navigator.triton", "navigator.many", "navigator.tools"),
    "navigator.formats": ("navigator.pipeline", "navigator.execution", "navigator.cli", "navigator.many"),
    "navigator.runners": ("navigator.pipeline", "navigator.execution", "navigator.cli", "navigator.many"),
    "navigator.sources": ("navigator.pipeline", "navigator.execution", "navigator.cli", "navigator.many"),
    "navigator.execution": ("navigator.pipeline", "navigator.cli", "navigator.many", "navigator.serving",
                            "navigator.triton"),
    "navigator.pipeline": ("navigator.cli", "navigator.many"),
    "navigator.serving": ("navigator.cli", "navigator.pipeline", "navigator.execution"),
    "navigator.triton": ("navigator.cli", "navigator.serving"),
    "navigator.config": ("navigator.pipeline", "navigator.execution", "navigator.cli"),
}
# leaf modules of execution/ that the sources use (the job records, the timing loop and what it
# needs): below the sources, so they must import nothing of the sources or above
LEAVES = ("navigator.execution.jobs", "navigator.execution.profiling", "navigator.execution.racing")


def modules() -> dict[str, Path]:
    out = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if "__pycache__" in parts or "standins" in parts:   # standins run inside Triton, not imported
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([package, *parts])
            if package == "navigator" and name.split(".")[1:2] in (["converters"], ["validators"], ["workspace"]):
                continue
            out[name] = path
    return out


def imports(mods: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {imported module of ours: line}."""
    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and "TYPE_CHECKING" in ast.unparse(node.test) for b in node.body for n in ast.walk(b)}
        edges: dict[str, int] = {}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for t in targets:
                r = resolve(t) if t.startswith("navigator") else None
                if r and r != name and not name.startswith(r + "."):   # a package's own __init__: not an edge
                    edges.setdefault(r, node.lineno)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(graph[w])))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_cycle():
    graph = imports(modules())
    found = cycles(graph)
    detail = ["; ".join(f"{a} -> {b} (line {graph[a][b]})" for a in c for b in graph[a] if b in c) for c in found]
    assert not found, "import cycles:\n" + "\n".join(detail)


def test_no_layer_imports_one_above_it():
    graph = imports(modules())
    bad = []
    for name, edges in graph.items():
        for layer, above in ABOVE.items():
            if name == layer or name.startswith(layer + "."):
                bad += [f"{name} -> {t} (line {line})" for t, line in edges.items()
                        if any(t == a or t.startswith(a + ".") for a in above)
                        and not (layer == "navigator.sources" and t in LEAVES)]
    for leaf in LEAVES:
        bad += [f"{leaf} -> {t} (line {line}): a leaf the sources use" for t, line in graph[leaf].items()
                if t.startswith(("navigator.sources", "navigator.pipeline", "navigator.execution"))
                and t not in LEAVES]
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_the_checks_can_fail():
    """A cycle and an upward import put into a copy of the graph are found."""
    graph = {"navigator.a": {"navigator.b": 1}, "navigator.b": {"navigator.c": 2}, "navigator.c": {"navigator.a": 3},
             "navigator.d": {}}
    assert cycles(graph) == [["navigator.a", "navigator.b", "navigator.c"]]
    real = imports(modules())
    assert "navigator.execution.worker" in real and not cycles(real)
    real["navigator.workspace.status"]["navigator.pipeline.run"] = 1
    real["navigator.pipeline.run"]["navigator.workspace.status"] = 1
    assert cycles(real)


MAX_LINES = 500   # a module past this is split where its parts meet (issue: Architecture 2)


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in sorted(modules().values())   # every folder of the package
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


# a format's name belongs to its record, converters, runners and source kind; elsewhere a string equal
# to one is another thing's name, listed here with what it names
FORMAT_HOMES = ("navigator.formats", "navigator.converters", "navigator.runners", "navigator.sources",
                "navigator.tools.debug_sides", "navigator.tools.engine")
NOT_FORMAT_NAMES = {   # module -> (the names it may write, what they name there)
    "navigator.deps": (("aoti", "onnx", "openvino", "tensorrt", "tensorrt_rtx", "torch", "torch_tensorrt"),
                       "pip distributions and import names"),
    "navigator.execution.forkserver": (("onnx", "torch"), "modules the fork server imports"),
    "navigator.execution.compile_cache": (("torch",), "the torch distribution whose version keys the Inductor seed"),
    "navigator.execution.forkserver_process": (("torch",), "the torch module in sys.modules"),
    "navigator.tools.gate.policy": (("onnx", "openvino", "tensorrt", "torch"),
                                    "the packages a throughput fingerprint records"),
    "navigator.triton.served": (("openvino", "tensorrt"), "Triton's openvino backend, ORT's tensorrt accelerator"),
    "navigator.triton.server": (("openvino", "tensorrt"), "Triton's backends"),
    "navigator.validators.numeric": (("torch",), "the torch module Polygraphy would import"),
}


def format_names_outside(mods: dict[str, Path]) -> dict[str, list[tuple[int, str]]]:
    from navigator.formats.builtin import FORMATS

    names = {f.name for f in FORMATS}
    found: dict[str, list[tuple[int, str]]] = {}
    for name, path in mods.items():
        if name.startswith(FORMAT_HOMES):
            continue
        other_names = NOT_FORMAT_NAMES.get(name, ((), ""))[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names and node.value not in other_names:
                found.setdefault(name, []).append((node.lineno, node.value))
    return found


def test_a_format_is_named_only_where_it_lives():
    """No module of the middle branches on a format's name: what differs by format is a field of
    its record (navigator.formats.builtin) or a method of its source kind."""
    found = format_names_outside(modules())
    assert not found, "format names outside their records: " + "; ".join(
        f"{m}: " + ", ".join(f"{v!r} (line {line})" for line, v in hits) for m, hits in found.items())


def test_the_format_name_check_can_fail(tmp_path):
    bad = tmp_path / "middle.py"
    bad.write_text('def f(fs):\n    return fs.format == "openvino"\n')
    assert format_names_outside({"navigator.pipeline.middle": bad}) == {"navigator.pipeline.middle": [(2, "openvino")]}
