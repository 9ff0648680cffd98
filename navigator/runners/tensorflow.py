"""TensorFlow SavedModel: runs one serving signature (CPU, or the GPU when
TensorFlow sees one)."""

from __future__ import annotations

from navigator.runners.base import Runner, RunnerUnavailable


class TensorFlowRunner(Runner):
    """Options: ``signature`` (default: ``signature.json`` beside the SavedModel, else serving_default)."""

    name = "tensorflow"
    requires = ("tensorflow",)

    def activate_impl(self) -> None:
        import os

        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        if self.device == "cuda":
            if not tf.config.list_physical_devices("GPU"):
                raise RunnerUnavailable("TensorFlow sees no GPU (tensorflow-cpu, or a build without CUDA); "
                                        "install 'tensorflow[and-cuda]' for GPU runs")
            self._device = "/GPU:0"
        else:
            self._device = "/CPU:0"
        from navigator.sources.tf_support import read_signature_name

        # the option, else the workspace's choice recorded beside the artifact (signature.json)
        name = self.options.get("signature") or read_signature_name(self.path)
        with tf.device(self._device):
            self._loaded = tf.saved_model.load(str(self.path))
        if name not in self._loaded.signatures:
            raise RuntimeError(f"{self.path}: no signature {name!r} (has {', '.join(self._loaded.signatures)})")
        self._fn = self._loaded.signatures[name]
        _, kwargs = self._fn.structured_input_signature
        self._specs = dict(kwargs)
        self.input_names = list(kwargs)
        self.output_names = list(self._fn.structured_outputs)
        self._tf = tf

    def infer_impl(self, feeds: dict) -> dict:
        tf = self._tf
        with tf.device(self._device):
            args = {n: tf.convert_to_tensor(v, dtype=self._specs[n].dtype) for n, v in feeds.items()}
            outputs = self._fn(**args)
        return {n: outputs[n].numpy() for n in self.output_names}

    def deactivate_impl(self) -> None:
        del self._fn, self._loaded
