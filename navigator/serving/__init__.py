"""Serving profile and configuration search through a real Triton server
(``navigator profile WS --triton``), and the workspace report (``navigator report WS``).

Parts: :mod:`~navigator.serving.measure` (measurement windows, Perf Analyzer's
stability rule, the result record both tools write), :mod:`~navigator.serving.search`
(the configuration space, Model Analyzer-style brute and quick search, ranking
under constraints), :mod:`~navigator.serving.loadgen` (our own asyncio load
generator), :mod:`~navigator.serving.perf_analyzer` (the real ``perf_analyzer``
binary: input data, command lines, CSV), :mod:`~navigator.serving.variants`
(config.pbtxt variants, ``--apply``), :mod:`~navigator.serving.ensemble` (an ensemble
measured end to end, the step to search, its max_batch_size), :mod:`~navigator.serving.handoff`
(model_analyzer.yaml, perf_analyzer.sh), :mod:`~navigator.serving.plots`,
:mod:`~navigator.serving.report` and :mod:`~navigator.serving.profile` (the run).

Importing this package imports neither tritonclient, numpy nor matplotlib.
"""
