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


def requirements(kind: str, packages: dict) -> list[str]:
    """pip requirement lines for the format ``kind`` (or ``function``, an ensemble step), pinned to the
    versions the workspace verified with (status.yaml's environment, keyed by distribution name)."""
    from navigator import formats

    needed = formats.get(kind).python_packages if kind != "function" and formats.registry.has(kind) else ()
    lines = []
    for dist in ("numpy",) + tuple(needed):
        version = (packages or {}).get(dist)
        lines.append(f"{dist}=={str(version).split('+')[0]}" if version else dist)
    return lines


def pack_env_script(model_name: str, reqs: list[str]) -> str:
    pip = " ".join(f'"{r}"' for r in reqs)
    return f"""#!/usr/bin/env bash
# Packs the Python environment that {model_name}'s model.py needs into env.tar.gz
# (conda-pack), for Triton's Python backend: stock Triton containers have no
# torch / onnxruntime / openvino for Python models. Versions are the ones
# navigator verified the model with. Run it where conda is installed.
#   PYTHON_VERSION must equal the Python of the container's backend stub
#   (python3 --version inside the Triton container).
#   For CUDA builds of torch add: --index-url https://download.pytorch.org/whl/cu130
set -euo pipefail
cd "$(dirname "$0")"
PYTHON_VERSION="${{PYTHON_VERSION:-3.12}}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export PYTHONNOUSERSITE=True
conda create -y -q -p "$WORK/env" "python=$PYTHON_VERSION"
conda run -p "$WORK/env" python -m pip install --no-cache-dir {pip}
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
{env_line}

Without an archive the model loads only in a container whose `python3` has
these packages.
"""
