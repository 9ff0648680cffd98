"""Execution: worker processes and what runs inside them.

- :mod:`~navigator.execution.jobs`: the typed job, task and event records the parent
  and its workers exchange;
- :mod:`~navigator.execution.isolation`: starting a worker and watching it (timeouts,
  crashes, the memory limit);
- :mod:`~navigator.execution.worker` and :mod:`~navigator.execution.stages`: the worker
  and its stages (reference, convert, verify, profile);
- :mod:`~navigator.execution.profiling`: in-process throughput and latency measurement;
- :mod:`~navigator.execution.processes`: process groups (shared with the Triton server).
"""
