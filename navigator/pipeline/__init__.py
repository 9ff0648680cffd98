"""The pipeline: export -> convert -> verify -> profile -> select best.

The live source is handled in this process (:mod:`~navigator.pipeline.prepare`);
every file-to-file step runs in a worker, one job per format
(:mod:`~navigator.pipeline.execute`, :mod:`~navigator.pipeline.dispatch`), whose
failures stay inside that format. The parent is the only writer of status.yaml and
saves it after every reported step (:mod:`~navigator.pipeline.events`), so the file
always tells where a run is.

- :mod:`~navigator.pipeline.context`: the run's shared state;
- :mod:`~navigator.pipeline.prepare`: device, source, samples, profiles, first record;
- :mod:`~navigator.pipeline.plan`: targets and the edges that reach them;
- :mod:`~navigator.pipeline.tasks`: the typed tasks of each format;
- :mod:`~navigator.pipeline.resume`: what a re-run may reuse;
- :mod:`~navigator.pipeline.reproduce`: reproduce.sh / reproduce.py;
- :mod:`~navigator.pipeline.outcome`: best and the exit code;
- :mod:`~navigator.pipeline.diskfull`: a full disk;
- :mod:`~navigator.pipeline.run`: the run itself.
"""

from __future__ import annotations

from navigator.pipeline.outcome import outcome_code, select_best
from navigator.pipeline.run import RunOutcome, run

__all__ = ["run", "RunOutcome", "outcome_code", "select_best"]
