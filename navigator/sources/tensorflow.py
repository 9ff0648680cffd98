"""TensorFlow sources: a SavedModel directory (CLI and API), or a Keras model /
tf.Module (API) exported to one in the calling process."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from navigator.errors import UserInputError
from navigator.execution.jobs import RunnerTask
from navigator.sources.base import Source, sha256_tree

FORMAT = "savedmodel"   # the format of this kind of source (its record in navigator.formats.builtin)


@dataclass
class SavedModelSource(Source):
    """A TensorFlow SavedModel directory (CLI and API), or a Keras model / tf.Module
    (API) exported to one in the calling process (``isolated: false``). The
    signature (``serving_default`` unless ``--signature``) gives the inputs and
    outputs; the reference runs in a worker with the ``tensorflow`` runner."""

    signature_name: str | None = None
    exported: dict = field(default_factory=dict)     # exporter + name map of a live object
    tmpdir: Any = None                                # keeps the export of a live object alive

    def _digest(self) -> str | None:
        """The whole directory (saved_model.pb, variables/, assets/): retrained
        weights under the same graph are a different model."""
        if self.path and (self.path / "saved_model.pb").is_file():
            return sha256_tree(self.path)
        return None

    def resolve(self, samples: Any, config, batch_dim_option: int | None, no_batching: bool):
        """A live object: export it now (a tf.Module without input_signature uses the first sample)."""
        import tempfile

        from navigator.sources import tf_support
        from navigator.sources.signature import detect_batch_dim

        first = None
        if samples is not None and not isinstance(samples, (str, bytes, os.PathLike)):
            if isinstance(samples, (list, tuple)) and samples:
                first = samples[0]
            else:
                try:
                    materialised = list(samples)
                except TypeError:
                    raise UserInputError(f"samples: expected an iterable of batches, got "
                                         f"{type(samples).__name__}") from None
                first = materialised[0] if materialised else None
                samples = materialised
        self.tmpdir = tempfile.TemporaryDirectory(prefix="navigator-tf-")
        out = Path(self.tmpdir.name) / "saved_model"
        self.exported = tf_support.export_object(self.obj, out, first)
        self.path = out
        self.signature = tf_support.reorder_inputs(tf_support.saved_model_signature(out, self.signature_name),
                                                   self.exported.get("input_order") or [])
        batch_dim = detect_batch_dim(self.signature, batch_dim=batch_dim_option, no_batching=no_batching)
        return (list(samples) if samples is not None and not isinstance(samples, (str, bytes, os.PathLike))
                else None), batch_dim

    def export(self, ws, out_path: Path) -> dict:
        """Copy the SavedModel directory into formats/savedmodel/model.savedmodel/."""
        from navigator.sources import tf_support

        tf_support.copy_tree(self.path, out_path)
        tf_support.write_name_map(out_path.parent, self.exported.get("name_map") or {})
        tf_support.write_signature_name(out_path.parent, self.signature_name)
        return {"exporter": self.exported.get("exporter") or "copy"}


def _tf_reference_runner(signature_name: str | None) -> RunnerTask:
    return RunnerTask("tensorflow", "cpu", options={"signature": signature_name or "serving_default"})


def saved_model_name(path: Path) -> str:
    """A SavedModel folder's model name: the folder's, or its parent's for ``<model>/1/``-style
    and ``saved_model/`` folders."""
    name = path.resolve().name
    if name in ("saved_model", "savedmodel", "model.savedmodel") or name.isdigit():   # .../<model>/1/
        name = path.resolve().parent.name or name
    return name


def open_saved_model(path: Path, signature_name: str | None = None) -> SavedModelSource:
    from navigator.sources import tf_support

    if not tf_support.is_saved_model_dir(path):
        raise UserInputError(f"{path}: not a SavedModel directory (no saved_model.pb in it)")
    sig = tf_support.saved_model_signature(path, signature_name)
    return SavedModelSource(format=FORMAT, key=FORMAT, name=saved_model_name(path), path=path,
                            signature=sig,
                            signature_name=signature_name,
                            reference_runner=_tf_reference_runner(signature_name))


def open_tf_object(model: Any, signature_name: str | None = None) -> SavedModelSource:
    """A Keras model or tf.Module: exported in this process when the samples are known."""
    from navigator import deps

    if not deps.has("tensorflow"):
        raise UserInputError(f"a {type(model).__name__} needs tensorflow", hint="pip install 'navigator[tensorflow]'")
    name = getattr(model, "name", None) or type(model).__name__
    return SavedModelSource(format=FORMAT, key=FORMAT, name=str(name), obj=model, isolated=False,
                            signature_name=signature_name, reference_runner=_tf_reference_runner(signature_name))
