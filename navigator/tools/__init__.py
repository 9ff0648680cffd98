"""Tools that work on a finished workspace: the release gate (:mod:`~navigator.tools.gate`),
the first divergent node of a format (:mod:`~navigator.tools.debug`) and a TensorRT plan's
header against Triton releases (:mod:`~navigator.tools.engine`)."""
