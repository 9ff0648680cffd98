"""Many models, many machines: ``navigator convert-many MANIFEST`` / ``navigator.convert_many``.

- :mod:`~navigator.many.manifest`: the manifest, checked before any work;
- :mod:`~navigator.many.node`: one phase of one model on a node (the single-model pipeline);
- :mod:`~navigator.many.schedule`: the phases as Ray tasks, retries, Ctrl-C; or one at a time;
- :mod:`~navigator.many.cluster`: Ray started for the run or an existing cluster, resources;
- :mod:`~navigator.many.placement`: placement.yaml, where each step ran;
- :mod:`~navigator.many.summary`: the model x format table and summary.md;
- :mod:`~navigator.many.run`: :func:`convert_many`.

Nothing here imports Ray at import time: it is an optional extra (``navigator[ray]``).
"""

from __future__ import annotations

from navigator.many.run import convert_many

__all__ = ["convert_many"]
