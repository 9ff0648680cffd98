"""navigator profile WS --triton: measure the model served by a real Triton server and
search its configuration (instance count x max batch size x dynamic-batching delay, and
on request preferred batch sizes and the response cache), as Model Analyzer does.

The format (--format, default the workspace's best) is emitted into a private
scratch repository (WS/serving/repo/) and served by a local tritonserver in explicit
model-control mode (or, with --url, a server someone else runs); every configuration is a
config.pbtxt variant loaded through the repository API and measured over a concurrency
sweep (or open loop over request rates) with Perf Analyzer's windows
(stable when the last 3 agree within 10%, at most 10). The real perf_analyzer runs
when it is there (--perf-analyzer auto), else navigator's own load generator.
--search brute sweeps (a sweep stops when throughput gains < 5%; what it passed over is
measured last, budget allowing), quick hill-climbs; both stop at --budget-s and record
what they skipped. Results: WS/serving/ (ranked.csv,
results.csv/json, chosen.config.pbtxt, PNG plots, model_analyzer.yaml,
perf_analyzer.sh, perf_input.json), status.yaml `serving:`, WS/report/summary.md.
--apply [REPO] writes the chosen instance_group/max_batch_size/dynamic_batching into
REPO's config.pbtxt (default WS/triton/). When that repository holds the model as an
ensemble (navigator triton --preprocess/--postprocess), the ensemble is measured end to
end and one step is searched (--step; auto: the busiest in a probe) and applied.
--budget-s bounds the measuring; server start and model loads are not counted.
Exit 1 when no configuration meets the constraints.
"""

from __future__ import annotations

import argparse


def _ints(text: str, flag: str, allow_none: bool = False) -> tuple:
    from navigator.errors import UserInputError

    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if allow_none and part.lower() == "none":
            out.append(None)
            continue
        try:
            out.append(int(part))
        except ValueError:
            raise UserInputError(f"{flag} {text!r}: expected integers separated by commas"
                                 + (" (or 'none')" if allow_none else "")) from None
    if not out:
        raise UserInputError(f"{flag}: empty list")
    return tuple(out)


def _preferred_sets(text: str) -> tuple:
    """``none/4/4,8/emitted`` -> ((), (4,), (4, 8), None)."""
    from navigator.errors import UserInputError

    out = []
    for part in str(text).split("/"):
        part = part.strip().lower()
        if part == "emitted":
            out.append(None)
        elif part == "none":
            out.append(())
        else:
            sizes = _ints(part, "--preferred-batch-sizes")
            if min(sizes) < 1:
                raise UserInputError(f"--preferred-batch-sizes {text!r}: sizes must be >= 1")
            out.append(tuple(sorted(set(sizes))))
    return tuple(out)


def _switches(text: str, flag: str) -> tuple[bool, ...]:
    """``off,on`` -> (False, True)."""
    from navigator.errors import UserInputError

    values = {"off": False, "on": True}
    parts = [p.strip().lower() for p in str(text).split(",") if p.strip()]
    if not parts or any(p not in values for p in parts):
        raise UserInputError(f"{flag} {text!r}: give off, on or off,on")
    return tuple(dict.fromkeys(values[p] for p in parts))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.strip()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("workspace", metavar="WS", help="workspace, or workdir holding one")
    parser.add_argument("--triton", action="store_true",
                        help="profile through a real Triton server (required: in-process profiles run in convert)")
    parser.add_argument("--format", metavar="KEY", help="the workspace format to serve (default: the best)")
    m = parser.add_argument_group("measurement")
    m.add_argument("--concurrency", default=None, metavar="START:END|N,…",
                   help="closed loop: concurrency sweep; START:END doubles (default 1:16 = 1,2,4,8,16), "
                        "START:END:STEP is linear")
    m.add_argument("--request-rate", metavar="START:END|R,…",
                   help="open loop instead: requests/s sent at constant intervals whether or not earlier ones "
                        "returned; START:END doubles, START:END:STEP is linear; the sweep stops at saturation")
    m.add_argument("--request-intervals", metavar="FILE",
                   help="open loop at the gaps of FILE (microseconds, one per line, Perf Analyzer's format; cycled)")
    m.add_argument("--shared-memory", choices=["none", "system"], default="none",
                   help="system: inputs and outputs through system shared memory (client and server on one host)")
    m.add_argument("--batch-sizes", default="1", metavar="B,…", help="request batch sizes (default 1)")
    m.add_argument("--measurement-ms", type=int, default=None, metavar="MS",
                   help="measurement window (default: adaptive, each point's fair share of the budget, 250 to "
                        "2000 ms; Perf Analyzer's own default is 5000)")
    m.add_argument("--budget-s", type=float, default=300.0, metavar="S",
                   help="time budget of the measuring (default 300); emitting the scratch repository, starting the "
                        "server and loading each configuration are not counted")
    m.add_argument("--perf-analyzer", choices=["auto", "on", "off"], default="auto",
                   help="the real perf_analyzer when present (auto), required (on), or navigator's load generator "
                        "(off)")
    s = parser.add_argument_group("serving")
    s.add_argument("--cpu-backends", action="store_true",
                   help="serve onnxruntime/openvino configs through CPU stand-ins of NVIDIA's backends (recorded as "
                        "stand_in: true)")
    s.add_argument("--python-backend", action="store_true", help="serve the format through a generated model.py")
    s.add_argument("--tritonserver", metavar="BINARY", help="another tritonserver binary (with its own backends)")
    s.add_argument("--url", metavar="[grpc://|http://]HOST:PORT",
                   help="measure a Triton server someone else runs (gRPC when no scheme is given): the model of "
                        "the workspace's name, as served there, after checking it is the workspace's model; "
                        "nothing there is started, stopped or changed without --load-configs")
    s.add_argument("--load-configs", action="store_true",
                   help="with --url: load each searched configuration there through the model-control API "
                        "(server in --model-control-mode explicit), and reload the model from the server's own "
                        "repository at the end")
    c = parser.add_argument_group("configuration search")
    c.add_argument("--search", choices=["brute", "quick"], default="brute",
                   help="brute: sweep (stops when throughput gains < 5%%, the rest measured last while the "
                        "budget lasts); quick: hill-climbing")
    c.add_argument("--objective", choices=["throughput", "p99_latency"], default="throughput")
    c.add_argument("--max-p99-ms", type=float, metavar="MS", help="constraint: p99 latency at most MS")
    c.add_argument("--min-throughput", type=float, metavar="N", help="constraint: at least N inferences/s")
    c.add_argument("--instance-counts", metavar="N,…", help="instance counts (default 1 … min(4, cores))")
    c.add_argument("--max-batch-sizes", metavar="B,…",
                   help="max batch sizes (default powers of 2 up to the emitted config's)")
    c.add_argument("--queue-delays-us", metavar="US,…",
                   help="dynamic batcher max_queue_delay_microseconds values; 'none' = no dynamic batching "
                        "(default 0)")
    c.add_argument("--preferred-batch-sizes", metavar="SET/SET/…",
                   help="preferred batch-size sets to search, '/' between sets, e.g. none/4/4,8 ('emitted': as "
                        "the emitted config has them; default: not searched)")
    c.add_argument("--response-cache", metavar="off,on",
                   help="search the response cache off and/or on (deterministic models only: checked first; the "
                        "local server gets --cache-config)")
    c.add_argument("--step", default="auto", metavar="auto|model|preprocess|postprocess|NAME",
                   help="when the repository holds the workspace's model as an ensemble: the step whose configuration "
                        "is searched (default auto: the busiest step in a probe of the ensemble)")
    c.add_argument("--apply", nargs="?", const="", default=None, metavar="REPO",
                   help="write the chosen settings into REPO's config.pbtxt (default WS/triton/; for an ensemble the "
                        "searched step's, with the ensemble's max_batch_size kept at most the step's), atomically")


def options_from_args(args: argparse.Namespace):
    from navigator.serving.profile import ServingOptions

    return ServingOptions(
        format=args.format, concurrency=args.concurrency, request_rate=args.request_rate,
        request_intervals=args.request_intervals, shared_memory=args.shared_memory,
        batch_sizes=_ints(args.batch_sizes, "--batch-sizes"),
        measurement_ms=args.measurement_ms, budget_s=args.budget_s, cpu_backends=args.cpu_backends,
        python_backend=args.python_backend, perf_analyzer=args.perf_analyzer, search=args.search,
        objective=args.objective, max_p99_ms=args.max_p99_ms, min_throughput=args.min_throughput,
        instance_counts=_ints(args.instance_counts, "--instance-counts") if args.instance_counts else None,
        max_batch_sizes=_ints(args.max_batch_sizes, "--max-batch-sizes") if args.max_batch_sizes else None,
        queue_delays_us=(_ints(args.queue_delays_us, "--queue-delays-us", allow_none=True)
                         if args.queue_delays_us else None),
        preferred_batch_sizes=_preferred_sets(args.preferred_batch_sizes) if args.preferred_batch_sizes else None,
        response_cache=_switches(args.response_cache, "--response-cache") if args.response_cache else None,
        apply=args.apply, tritonserver=args.tritonserver, step=args.step, url=args.url,
        load_configs=args.load_configs)


def run(args: argparse.Namespace) -> int:
    from navigator.console import Reporter
    from navigator.errors import UserInputError
    from navigator.serving import profile

    if not args.triton:
        raise UserInputError("navigator profile measures through Triton only: pass --triton",
                             hint="the in-process profile runs during `navigator convert` (--profile-budget-s)")
    opts = options_from_args(args)
    return profile.run(args.workspace, opts, Reporter("quiet" if getattr(args, "quiet", False) else "auto"))
