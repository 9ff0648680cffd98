"""The prepare stage of a worker: a factory file or a Hugging Face folder opened, its
samples and reference computed (:func:`navigator.sources.prepare.prepare_source`), and the
result left as npz files and ``prepared.json`` for the calling process, which never loads
the user's code."""

from __future__ import annotations

from pathlib import Path

from navigator.config import NavigatorConfig
from navigator.workspace import npz

PREPARED_FILE = "prepared.json"


class _Collect:
    """A reporter for the prepare worker: its warnings travel back to the parent's console."""

    def __init__(self):
        self.lines: list[str] = []

    def warn(self, text: str) -> None:
        self.lines.append(text)

    def info(self, text: str) -> None:
        pass


def run_prepare(task) -> dict:
    """The prepare stage of a worker: open the factory (or Hugging Face folder), take or generate the
    samples, compute the reference, and leave them with the signature and the source's facts in
    ``task.prepare.out``."""
    import json

    from navigator.sources import open_source
    from navigator.sources.prepare import prepare_source

    spec = task.prepare
    config = NavigatorConfig.from_dict(spec.config)
    out = Path(spec.out)
    samples = _load_staged_samples(Path(spec.samples)) if spec.samples else None
    source = open_source(spec.model, config.model_format, config.signature_name, task=config.task,
                         trust_remote_code=config.trust_remote_code)
    reporter = _Collect()
    prep = prepare_source(source, samples, config, reporter)
    for i, batch in enumerate(prep.batches):
        npz.save(out / "inputs" / f"{i:03d}.npz", batch)
    for i, outputs in enumerate(prep.reference or []):
        npz.save(out / "reference" / f"{i:03d}.npz", outputs)
    for i, outputs in enumerate(prep.variation or []):
        if outputs is not None:
            npz.save(out / "variation" / f"{i:03d}.npz", outputs)
    src = prep.source
    facts = {"signature": src.signature.to_dict(), "batch_dim": prep.batch_dim, "profiles": prep.profiles,
             "stateful": prep.stateful,
             "samples_info": prep.samples_info.to_dict(), "warnings": reporter.lines,
             "source": src.worker_facts()}
    from navigator.workspace.atomic import write_text

    write_text(out / PREPARED_FILE, json.dumps(facts, default=str))
    return {"count": len(prep.batches)}


def _load_staged_samples(folder: Path) -> list:
    batches = []
    for path in sorted(folder.glob("*.npz")):
        arrays = npz.load(path)
        if "__single" in arrays:
            batches.append(arrays["__single"])
        elif arrays and all(k.startswith("__pos_") for k in arrays):
            batches.append(tuple(arrays[f"__pos_{j}"] for j in range(len(arrays))))
        else:
            batches.append(arrays)
    return batches
