"""The deploy kit written beside a Triton repository (``<workspace>/deploy/`` by default; never
inside the repository, where Triton would take a folder for a model and fail to start):

- ``run.sh``: the ``docker run`` line of NVIDIA's Triton container, at the release the
  repository's TensorRT engines were built for (check-engine's table; else the release of the
  Triton that ``navigator serve`` runs here), with the server flags the configs need (response
  cache, rate limiter) and explicit model control loading the repository's models.
- ``client.py``: a client generated from the served model's config (HTTP or gRPC, sync or async,
  inputs through system shared memory optionally), sending ``sample.npz`` (the workspace's first
  stored sample) or any .npz, and comparing with ``reference.npz`` when asked.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from navigator.errors import UserInputError
from navigator.triton import config as cfg_mod

DEFAULT_RELEASE = "24.10"   # Triton 2.51: the server navigator serve runs, and the one the tests use
DEFAULT_WHY = "Triton 2.51, the server navigator serve runs this repository with here"


def release_for(repo: Path, models: list[str]) -> tuple[str, str]:
    """(release tag, why): the newest release whose TensorRT built every engine of ``models``."""
    from navigator.tools import engine

    versions = set()
    for name in models:
        for plan in sorted((repo / name).glob("[0-9]*/model.plan")):
            try:
                header = engine.read_header(plan)
            except UserInputError as e:   # the kit never fails the emission: it says what it could not read
                return DEFAULT_RELEASE, (f"{name}'s engine header cannot be read ({e.message}); "
                                         "the release is the default")
            if header.rtx:
                return DEFAULT_RELEASE, (f"{name}'s engine is {header.display}: Triton's TensorRT backend does not "
                                         "load it; the release here is the default")
            versions.add(header.version[:3])
    if not versions:
        return DEFAULT_RELEASE, DEFAULT_WHY
    if len(versions) > 1:
        found = ", ".join(".".join(map(str, v)) for v in sorted(versions))
        return DEFAULT_RELEASE, f"the engines were built by different TensorRT versions ({found}): rebuild them alike"
    (version,) = versions
    tags = engine.releases_with(version)
    text = ".".join(map(str, version))
    if not tags:
        return DEFAULT_RELEASE, (f"no release in check-engine's table has TensorRT {text}: check yours with "
                                 "navigator check-engine")
    tag = max(tags, key=lambda t: tuple(int(x) for x in t.split(".")))
    sure = "" if engine.triton_release(tag).confirmed else "; that row of the table is not confirmed"
    return tag, f"its TensorRT is {text}, the version that built the engines (navigator check-engine{sure})"


def write(deploy: Path, repo: Path, served: str, models: list, sample: Path | None, reference: Path | None,
          io: dict[str, str]) -> list[Path]:
    """Write the kit into ``deploy``; ``models``: the EmittedModels of this emission, ``served``
    the one clients call, ``io`` its Triton input/output name -> the sample's key."""
    from navigator.triton.server import server_flags
    from navigator.workspace.atomic import write_text

    deploy.mkdir(parents=True, exist_ok=True)
    names = [m.name for m in models]
    tag, why = release_for(repo, names)
    configs = {m.name: cfg_mod.read(repo / m.name / "config.pbtxt") for m in models}
    gpu = any(g.kind == g.KIND_GPU for c in configs.values() for g in c.instance_group)
    python = [m.name for m in models if m.python]
    flags = server_flags(configs.values())
    loads = " ".join(f"--load-model={n}" for n in names)
    lines = ["#!/usr/bin/env bash",
             "# Serve this Triton repository with NVIDIA's Triton container (written by navigator triton).",
             "#   bash run.sh [REPO]     REPO: default the repository this kit was written for",
             f"# Release {tag}: {why}. TRITON_IMAGE overrides the image.",
             *([f"# Python-backend models ({', '.join(python)}) import their packages inside the container: see "
                "each model folder's README.md (EXECUTION_ENV_PATH)."] if python else []),
             *([f"# Server flags the configs need: {' '.join(flags)}."] if flags else []),
             "set -euo pipefail",
             f'REPO="$(cd "${{1:-{repo}}}" && pwd)"',
             f'IMAGE="${{TRITON_IMAGE:-nvcr.io/nvidia/tritonserver:{tag}-py3}}"',
             f'exec docker run --rm {"--gpus all " if gpu else ""}--shm-size=1g -p 8000:8000 -p 8001:8001 '
             '-p 8002:8002 \\',
             '    -v "$REPO":/models:ro "$IMAGE" \\',
             f"    tritonserver --model-repository=/models --model-control-mode=explicit {loads}"
             + (" " + " ".join(flags) if flags else ""), ""]
    run_sh = deploy / "run.sh"
    write_text(run_sh, "\n".join(lines))
    os.chmod(run_sh, 0o755)
    top = configs[served]
    inputs = {t.name: (io.get(t.name, t.name), _wire_dtype(t.data_type)) for t in top.input}
    outputs = {t.name: io.get(t.name, t.name) for t in top.output}
    client = deploy / "client.py"
    write_text(client, CLIENT.format(model=served, inputs=inputs, outputs=outputs,
                                     batching=top.max_batch_size > 0,
                                     stateful=top.HasField("sequence_batching")))
    os.chmod(client, 0o755)
    written = [run_sh, client]
    for src, name in ((sample, "sample.npz"), (reference, "reference.npz")):
        if src is not None and src.is_file():
            shutil.copyfile(src, deploy / name)
            written.append(deploy / name)
    return written


def _wire_dtype(data_type: int) -> str:
    """TYPE_FP32 -> FP32, TYPE_STRING -> BYTES: the datatype a client sends."""
    from tritonclient.grpc import model_config_pb2 as mc

    name = mc.DataType.Name(data_type)[len("TYPE_"):]
    return "BYTES" if name == "STRING" else name


CLIENT = '''#!/usr/bin/env python3
"""Call the Triton model {model!r} (generated by navigator triton from its config.pbtxt).

    pip install 'tritonclient[all]' numpy
    python client.py [INPUTS.npz] [--url HOST:PORT] [--protocol http|grpc] [--async]
                     [--shared-memory] [--reference REF.npz --atol 1e-4 --rtol 1e-3] [--out OUT.npz]

INPUTS.npz (default: sample.npz beside this file, a verified sample) holds one array per input.
--shared-memory sends the inputs through system shared memory (client and server on one host).
--reference compares the outputs (reference.npz beside this file: what the source model gave for
sample.npz) and exits 1 when one differs.
"""

import argparse
import os
import queue
import sys
import time

import numpy as np

MODEL = {model!r}
INPUTS = {inputs!r}     # Triton input -> (.npz key, Triton datatype)
OUTPUTS = {outputs!r}   # Triton output -> .npz key
STATEFUL = {stateful!r}   # a sequence batcher keeps the state: the request is a one-step sequence
HERE = os.path.dirname(os.path.abspath(__file__))


def feeds(path):
    with np.load(path, allow_pickle=False) as data:
        missing = [key for key, _ in INPUTS.values() if key not in data.files]
        if missing:
            sys.exit("%s: no input %s (it holds %s)" % (path, ", ".join(missing), ", ".join(data.files)))
        out = {{}}
        for name, (key, datatype) in INPUTS.items():
            value = np.ascontiguousarray(data[key])
            if datatype == "BYTES":   # strings travel as bytes objects
                value = np.array([str(v).encode() for v in value.ravel()], dtype=object).reshape(value.shape)
            out[name] = (value, datatype)
        return out


def infer(args, tensors):
    if args.protocol == "grpc":
        import tritonclient.grpc as client_mod
    else:
        import tritonclient.http as client_mod
    client = client_mod.InferenceServerClient(args.url)
    regions = []
    try:
        inputs = []
        for name, (value, datatype) in tensors.items():
            tensor = client_mod.InferInput(name, list(value.shape), datatype)
            if args.shared_memory and datatype != "BYTES":
                import tritonclient.utils.shared_memory as shm

                # unique per call (no slash: it is part of a URL)
                region = "%s_%s_%d_%s" % (MODEL, name, os.getpid(), os.urandom(4).hex())
                handle = shm.create_shared_memory_region(region, "/" + region, value.nbytes)
                try:
                    shm.set_shared_memory_region(handle, [value])
                    client.register_system_shared_memory(region, "/" + region, value.nbytes)
                except Exception:
                    shm.destroy_shared_memory_region(handle)
                    raise
                regions.append((region, handle))
                tensor.set_shared_memory(region, value.nbytes)
            else:
                tensor.set_data_from_numpy(value)
            inputs.append(tensor)
        wanted = [client_mod.InferRequestedOutput(name) for name in OUTPUTS]
        extra = dict(sequence_id=1, sequence_start=True, sequence_end=True) if STATEFUL else {{}}
        if not args.async_:
            result = client.infer(MODEL, inputs, outputs=wanted, **extra)
        elif args.protocol == "grpc":
            done = queue.Queue()
            client.async_infer(MODEL, inputs, lambda result, error: done.put((result, error)), outputs=wanted,
                               **extra)   # tritonclient calls back with result= and error=
            result, error = done.get(timeout=300)
            if error is not None:
                raise error
        else:
            result = client.async_infer(MODEL, inputs, outputs=wanted, **extra).get_result()
        return {{key: result.as_numpy(name) for name, key in OUTPUTS.items()}}
    finally:
        release(client, regions)


def release(client, regions):
    """Unregister and remove every region, each even when another step failed (a region left in
    /dev/shm outlives the process); a failure here is printed, the outputs are kept."""
    for name, handle in regions:
        import tritonclient.utils.shared_memory as shm

        deadline = time.monotonic() + 10
        while True:
            try:
                client.unregister_system_shared_memory(name)
                break
            except Exception as e:   # noqa: BLE001
                # the server may still hold the request a moment after its reply: the region is "in use"
                if "in use" in str(e) and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                print("warning: unregistering shared memory %s: %s" % (name, e), file=sys.stderr)
                break
        try:
            shm.destroy_shared_memory_region(handle)
        except Exception as e:   # noqa: BLE001
            print("warning: removing shared memory %s: %s" % (name, e), file=sys.stderr)
    client.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="?", default=os.path.join(HERE, "sample.npz"))
    ap.add_argument("--url", help="default localhost:8000 (http) or localhost:8001 (grpc)")
    ap.add_argument("--protocol", choices=["http", "grpc"], default="http")
    ap.add_argument("--async", dest="async_", action="store_true", help="the asynchronous API")
    ap.add_argument("--shared-memory", action="store_true", help="inputs through system shared memory")
    ap.add_argument("--reference", nargs="?", const=os.path.join(HERE, "reference.npz"),
                    help="compare with these outputs (default reference.npz beside this file)")
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--out", help="write the outputs to this .npz")
    args = ap.parse_args()
    args.url = args.url or ("localhost:8001" if args.protocol == "grpc" else "localhost:8000")
    outputs = infer(args, feeds(args.inputs))
    for key, value in outputs.items():
        print(key, value.dtype, list(value.shape))
    if args.out:
        np.savez(args.out, **outputs)
    if args.reference:
        with np.load(args.reference, allow_pickle=False) as ref:
            bad = [k for k in outputs if k in ref.files and not np.allclose(
                outputs[k].reshape(ref[k].shape) if outputs[k].size == ref[k].size else outputs[k], ref[k],
                atol=args.atol, rtol=args.rtol)]
        if bad:
            sys.exit("differs from the reference: " + ", ".join(bad))
        print("matches the reference (atol %g, rtol %g)" % (args.atol, args.rtol))


if __name__ == "__main__":
    main()
'''
