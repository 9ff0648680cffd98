"""navigator convert-many MANIFEST.yaml: convert many models, in parallel on Ray.

The manifest lists models (anything `navigator convert` takes) with per-model options over
shared defaults:

  defaults: {targets: [onnx, onnx-optimized], max_batch_size: 16}
  resources: {cpus: 1}                # per model task: cpus, gpus, memory_gb, accelerator_type
  retries: 2                          # re-runs of a model phase whose node was lost
  models:
    - a.onnx
    - {model: m.py:make, shapes: "x:8x3"}

Each model gets its own workspace in --workdir, exactly as `navigator convert` writes it
(plus placement.yaml: where each step ran), so status, triton, gate and report work on it;
`navigator gate DIR --policy P --junit out.xml` gates them all in one JUnit file. With Ray
installed (pip install 'navigator[ray]') the models run in parallel on a Ray instance started
for the run, or on the cluster at --ray-address; measurements run alone on their node.
Without Ray, one at a time. Re-running the manifest resumes every workspace.

Exit 0 when every model is ok; 1 when a target failed; 2 for a bad manifest (one line, before
any work) or a model that turned out to be bad input; 3 internal error; 130 interrupted.
The worst model decides. The table also goes to DIR/summary.md.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.strip()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("manifest", metavar="MANIFEST", help="the manifest (YAML)")
    parser.add_argument("--workdir", help="folder of the workspaces and summary.md (default ./navigator_workdir)")
    parser.add_argument("--ray-address", metavar="ADDR",
                        help="HOST:PORT of a running Ray cluster (default: start Ray on this machine for the run); "
                             "its nodes need the resource navigator_profile and a shared --workdir")
    parser.add_argument("--max-parallel", type=int, metavar="N", help="at most N models at a time (default: as "
                                                                      "many as the cluster's resources allow)")
    parser.add_argument("--keep-ray-logs", action="store_true",
                        help="keep the local Ray instance's session folder (logs) and print where")


def run(args: argparse.Namespace) -> int:
    from navigator import console
    from navigator.many import convert_many

    reporter = console.Reporter("quiet" if getattr(args, "quiet", False) else "auto")
    result = convert_many(args.manifest, workdir=args.workdir, ray_address=args.ray_address,
                          max_parallel=args.max_parallel, reporter=reporter, keep_ray_logs=args.keep_ray_logs)
    import sys

    for m in result.models:
        if m.message and not m.interrupted:
            print(f"error: {m.name}: {m.message}", file=sys.stderr)
        for failure in m.failures:
            print(f"failed: {m.name}: {failure}", file=sys.stderr)
    if result.interrupted:
        print("interrupted; run the same manifest again to resume", file=sys.stderr)
    return result.exit_code
