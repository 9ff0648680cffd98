"""Python-backend models: the generated ``model.py`` and the recipe for its environment.

``model.py`` is the shipped template ``model.py.tmpl`` with one
``SETTINGS`` literal filled in (what to load, Triton name -> artifact name);
it loads the artifact from its own version folder, so the repository holds no
path of the machine that generated it. Stock Triton containers lack torch,
onnxruntime and openvino for Python models: each Python-backend model gets a
``README.md`` and a ``pack_env.sh`` that build a conda-pack archive, which
``EXECUTION_ENV_PATH`` names (set only with ``--execution-env``).
"""

from __future__ import annotations

import ast
import pprint
from importlib import resources

from navigator.errors import UserInputError
from navigator.triton.server_env import TRITON_VERSION

PLACEHOLDER = "__NAVIGATOR_SETTINGS__"
ENV_PARAMETER = "EXECUTION_ENV_PATH"



def template() -> str:
    return resources.files("navigator.triton").joinpath("model.py.tmpl").read_text(encoding="utf-8")


def settings_for(fmt: str, artifact: str, inputs, outputs, *, function: str | None = None,
                 key: str | None = None, device: str | None = None) -> dict:
    """The SETTINGS literal: ``inputs``/``outputs`` are TensorPlans (Triton name, artifact name).
    ``fmt`` is a format (its record's ``python_loader`` says how model.py loads it; ``runner``:
    through the format's own Navigator runner class) or ``function`` (an ensemble step)."""
    kind = fmt
    out: dict = {}
    if fmt != "function":
        from navigator import formats

        record = formats.get(fmt)
        kind = record.python_loader or fmt
        if kind == "runner":   # a plugin format: its runner class, imported in the Triton model's environment
            want = "cuda" if device == "KIND_GPU" else "cpu"
            specs = record.runners_on(want) or next((s for s in record.runners.values() if s), ())
            if not specs:
                raise UserInputError(f"format {fmt} has no runner the Python backend could load it with")
            out["runner_class"] = formats.registry.runner_classes()[specs[0].runner]
            out["runner_device"] = specs[0].device
    out = {"kind": kind, "artifact": artifact, "format_key": key,
           "inputs": [{"name": t.name, "feed": t.feed} for t in inputs],
           "outputs": [{"name": t.name, "fetch": t.feed} for t in outputs]} | out
    if function:
        out["function"] = function
    return out


def render_model_py(settings: dict) -> str:
    """model.py text; the result is parsed as Python before it is returned."""
    text = template()
    if text.count(PLACEHOLDER) != 1:
        raise RuntimeError("the model.py template must hold the settings placeholder exactly once")
    literal = pprint.pformat(settings, width=100, sort_dicts=False)
    if ast.literal_eval(literal) != settings:   # only plain str/int/list/dict/None go in
        raise RuntimeError("model.py settings do not survive as a Python literal")
    text = text.replace(PLACEHOLDER, literal)
    ast.parse(text)
    return text


STUB_NUMPY = "numpy<2"     # Triton 2.51's Python-backend stub gives wrong outputs with numpy 2 (FACTS.md)
_STUB_TRITON = TRITON_VERSION


def requirements(kind: str, packages: dict, step_files=(), notes: list[str] | None = None) -> list[str]:
    """pip requirement lines for the format ``kind`` (or ``function``, an ensemble step): the
    format's packages and the third-party imports of ``step_files``, pinned to the versions
    the workspace ran with (status.yaml's environment, keyed by distribution name; else the
    version installed here, which the step files were probed with). numpy is the stub's
    ``numpy<2``, not the workspace's numpy 2. What cannot be pinned goes to ``notes``."""
    from navigator import formats

    notes = notes if notes is not None else []
    needed = list(formats.get(kind).python_packages) if kind != "function" and formats.registry.has(kind) else []
    for path in step_files:
        for dist in _distributions(path, notes):
            if dist not in needed:
                needed.append(dist)
    lines = [STUB_NUMPY]
    for dist in needed:
        if dist == "numpy":
            continue
        version = (packages or {}).get(dist) or _installed(dist)
        lines.append(f"{dist}=={str(version).split('+')[0]}" if version else dist)
        notes.extend(_numpy_conflict(dist, version))
    return lines


def imported_modules(path) -> list[str]:
    """Top-level modules a Python file imports (absolute imports anywhere in it), minus the
    standard library and ``__future__``; the order of first appearance."""
    import ast
    import sys
    from pathlib import Path

    tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top and top != "__future__" and top not in sys.stdlib_module_names and top not in found:
                found.append(top)
    return found


def _distributions(path, notes: list[str]) -> list[str]:
    """Distribution names for the third-party imports of ``path`` (a module found neither
    installed nor beside the file is noted: add it by hand)."""
    from importlib import metadata
    from pathlib import Path

    mapping = metadata.packages_distributions()
    out = []
    for module in imported_modules(path):
        dists = mapping.get(module)
        if dists:
            out.append(dists[0])
        elif (Path(path).parent / f"{module}.py").is_file() or (Path(path).parent / module).is_dir():
            notes.append(f"{Path(path).name} imports {module}, a module of its own folder: copy it beside step.py")
        else:
            notes.append(f"{Path(path).name} imports {module}, which is not installed here: add its package to "
                         "pack_env.sh by hand")
    return out


def _installed(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _numpy_conflict(dist: str, version: str | None) -> list[str]:
    """A note when ``dist`` (as installed here) requires numpy 2, which the stub's numpy<2 excludes."""
    from importlib import metadata

    try:
        from packaging.requirements import Requirement
        from packaging.version import Version
        reqs = metadata.requires(dist) or []
    except (ImportError, metadata.PackageNotFoundError):
        return []
    for text in reqs:
        try:
            req = Requirement(text)
        except ValueError:
            continue
        if req.name.lower() == "numpy" and (req.marker is None or req.marker.evaluate()) and \
                not req.specifier.contains(Version("1.26.4"), prereleases=True):
            return [f"{dist} {version or ''} requires {req} but the Triton {_STUB_TRITON} Python-backend stub needs "
                    f"{STUB_NUMPY}: pin an older {dist} in pack_env.sh, or set NUMPY_SPEC for a Triton whose stub "
                    "takes numpy 2"]
    return []


def pack_env_script(model_name: str, reqs: list[str], *, numpy_note: str = "") -> str:
    numpy_line = next((r for r in reqs if r.startswith("numpy")), STUB_NUMPY)
    pip = " ".join(f'"{r}"' for r in reqs if not r.startswith("numpy"))
    return f"""#!/usr/bin/env bash
# Packs the Python environment that {model_name}'s model.py needs into env.tar.gz
# (conda-pack), for Triton's Python backend: stock Triton containers have no
# torch / onnxruntime / openvino for Python models. Versions are the ones
# navigator verified the model with (and, for an ensemble step, the packages its
# file imports, at the versions it was probed with). Run it where conda is installed.
#   PYTHON_VERSION must equal the Python of the container's backend stub
#   (python3 --version inside the Triton container).
#   NUMPY_SPEC: the Triton {_STUB_TRITON} Python-backend stub gives wrong outputs with numpy 2,
#   hence {numpy_line}{numpy_note}; set it (e.g. "numpy==2.*") for a Triton whose stub takes numpy 2.
#   For CUDA builds of torch add: --index-url https://download.pytorch.org/whl/cu130
set -euo pipefail
cd "$(dirname "$0")"
PYTHON_VERSION="${{PYTHON_VERSION:-3.12}}"
NUMPY_SPEC="${{NUMPY_SPEC:-{numpy_line}}}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export PYTHONNOUSERSITE=True
conda create -y -q -p "$WORK/env" "python=$PYTHON_VERSION"
conda run -p "$WORK/env" python -m pip install --no-cache-dir "$NUMPY_SPEC"{(" " + pip) if pip else ""}
conda install -y -q -c conda-forge conda-pack
conda-pack -p "$WORK/env" -o env.tar.gz --force
echo "wrote $(pwd)/env.tar.gz; reference it with: navigator triton WS --execution-env env.tar.gz"
"""


def readme(model_name: str, kind: str, reqs: list[str], env_archive: str | None) -> str:
    what = "a user function step of an ensemble" if kind == "function" else f"the {kind} artifact"
    env_line = (f"config.pbtxt already names it: `{ENV_PARAMETER}` = `$$TRITON_MODEL_DIRECTORY/{env_archive}`; "
                f"put the archive at `{model_name}/{env_archive}`."
                if env_archive else
                "config.pbtxt does not name an archive yet: after packing, add\n\n"
                "```\nparameters { key: \"EXECUTION_ENV_PATH\" value { string_value: "
                "\"$$TRITON_MODEL_DIRECTORY/env.tar.gz\" } }\n```\n\n"
                "or run `navigator triton WS --execution-env env.tar.gz` again.")
    return f"""# {model_name}: a Triton Python-backend model

`<version>/model.py` serves {what} with Triton's Python backend; it loads the
file from its own version folder and maps Triton's tensor names to the
artifact's (the `SETTINGS` literal at its top).

## Its Python environment

Stock Triton containers have no torch, onnxruntime or openvino for Python
models, so this model ships its own environment as a conda-pack archive:

```
{chr(10).join(reqs)}
```

`pack_env.sh` (next to this file) builds `env.tar.gz` with exactly these
packages; set `PYTHON_VERSION` to the Python of the container's backend stub.
numpy stays below 2 because the Triton {_STUB_TRITON} Python-backend stub gives wrong
outputs with numpy 2 (`NUMPY_SPEC` overrides it for a Triton whose stub takes numpy 2).
{env_line}

Without an archive the model loads only in a container whose `python3` has
these packages.
"""
