"""navigator triton WS: write a Triton model repository from a workspace.

WS is a workspace folder or a workdir holding exactly one workspace. The
repository goes to --repo (default <workspace>/triton/). Every config.pbtxt is
built as a ModelConfig message, written with protobuf text_format and parsed
back; versions are added beside existing ones (an existing version is
replaced only with --force).

Model names: <model> for the best format or one key; <model>_<key> ('-' -> '_')
for each format with --formats all or several keys; with --preprocess /
--postprocess the ensemble is <model> and its steps <model>_preprocess,
<model>_<key>, <model>_postprocess. torch_export, aoti (unless --aoti-native)
and any format with --python-backend are served by a generated model.py.

A Hugging Face text model converted from a folder with tokenizer.json is served
as an ensemble that takes text (--tokenizer, on by default there): steps
<model>_preprocess (the tokenizer), <model>_<key> and, for classification,
<model>_postprocess (labels from config.id2label).
"""

from __future__ import annotations

import argparse

_DESTS = ("repo", "formats", "model_name", "model_version", "max_batch_size", "instances", "kind",
          "dynamic_batching", "max_queue_delay_us", "preferred_batch_sizes", "warmup", "python_backend", "labels",
          "response_cache", "rate_limit_resources", "rate_limit_priority", "queue_policy", "priority_levels",
          "default_priority_level", "cuda_graphs", "ort_trt_precision", "preprocess", "postprocess",
          "execution_env", "aoti_native", "force", "tokenizer", "sequence_strategy", "max_candidate_sequences",
          "sequence_idle_us", "deploy")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.strip()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("workspace", metavar="WS", help="workspace, or workdir holding one")
    g = parser.add_argument_group("repository")
    g.add_argument("--repo", metavar="DIR", help="the model repository (default <workspace>/triton/)")
    g.add_argument("--formats", metavar="best|all|KEY,…", help="what to serve (default best)")
    g.add_argument("--model-name", metavar="N", help="Triton model name (default: the workspace's model name)")
    g.add_argument("--model-version", type=int, metavar="N", help="version folder (default: the next free number)")
    g.add_argument("--force", action="store_true", default=None,
                   help="replace an existing version N / a config whose interface differs")
    g.add_argument("--deploy", metavar="DIR|none",
                   help="the deploy kit: run.sh (docker run of Triton's container) and client.py (default "
                        "<workspace>/deploy/; never inside the repository, where Triton would take it for a model)")
    b = parser.add_argument_group("batching and instances")
    b.add_argument("--max-batch-size", type=int, metavar="N",
                   help="default: the shape profile's largest batch; 0 turns batching off")
    b.add_argument("--dynamic-batching", action=argparse.BooleanOptionalAction, default=None,
                   help="the dynamic batcher for batching models (default on)")
    b.add_argument("--max-queue-delay-us", type=int, metavar="US", help="dynamic batcher's queue delay")
    b.add_argument("--preferred-batch-sizes", metavar="B,…",
                   help="the dynamic batcher's preferred sizes (default: the in-process profile's peak when it "
                        "found a real optimum there, else none: batches up to max_batch_size)")
    b.add_argument("--instances", type=int, metavar="N", help="instances per group (default 1)")
    b.add_argument("--kind", choices=["auto", "cpu", "gpu"], help="instance kind (default auto; fixed by the "
                                                                  "format where it runs on one device only)")
    b.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=None,
                   help="warm-up from the stored samples (default on)")
    q = parser.add_argument_group("stateful models (sequence batcher)")
    q.add_argument("--sequence-strategy", choices=["oldest", "direct"],
                   help="the sequence batcher's strategy (default oldest: sequences batched as they come)")
    q.add_argument("--max-candidate-sequences", type=int, metavar="N",
                   help="oldest: sequences batched together (default 4)")
    q.add_argument("--sequence-idle-us", type=int, metavar="US",
                   help="a sequence idle this long is released (default 5000000)")
    s = parser.add_argument_group("serving options")
    s.add_argument("--response-cache", action="store_true", default=None,
                   help="response_cache (the server also needs --cache-config)")
    s.add_argument("--rate-limit-resource", dest="rate_limit_resources", action="append", metavar="R:N[:global]",
                   help="rate-limiter resource of the instances (repeatable)")
    s.add_argument("--rate-limit-priority", type=int, metavar="N", help="rate-limiter priority of the instances")
    s.add_argument("--queue-policy", metavar="K=V,…",
                   help="timeout_us=N,max_queue_size=M,action=reject|delay,allow_override=true")
    s.add_argument("--priority-levels", type=int, metavar="N", help="request priority levels (1 = highest)")
    s.add_argument("--default-priority-level", type=int, metavar="N",
                   help="level of requests that give none (default: the lowest, N)")
    s.add_argument("--cuda-graphs", action="store_true", default=None,
                   help="CUDA graphs (TensorRT plans; ONNX Runtime on GPU instances)")
    s.add_argument("--ort-trt-precision", choices=["fp16", "fp32"],
                   help="ONNX on GPU: ONNX Runtime's TensorRT accelerator at this precision")
    s.add_argument("--labels", metavar="[OUTPUT=]FILE", help="class labels, one per line, for an output "
                                                             "(default the first)")
    p = parser.add_argument_group("Python backend and ensembles")
    p.add_argument("--python-backend", action="store_true", default=None,
                   help="serve the format(s) through a generated model.py")
    p.add_argument("--aoti-native", action="store_true", default=None,
                   help="serve aoti with the PyTorch backend (platform torch_aoti, beta) instead of model.py")
    p.add_argument("--execution-env", metavar="ENV.tar.gz",
                   help="conda-pack archive in the model folder, named by EXECUTION_ENV_PATH (copied there when "
                        "the file exists)")
    p.add_argument("--preprocess", metavar="FILE.py", help="defines preprocess(**inputs) -> dict: an ensemble step")
    p.add_argument("--postprocess", metavar="FILE.py",
                   help="defines postprocess(**outputs) -> dict: an ensemble step")
    p.add_argument("--tokenizer", action=argparse.BooleanOptionalAction, default=None,
                   help="Hugging Face text models: an ensemble whose first step tokenizes BYTES text with the "
                        "folder's tokenizer.json (and whose last adds labels for classification); default on where "
                        "the folder has one")


def options_from_args(args: argparse.Namespace) -> dict:
    return {d: getattr(args, d) for d in _DESTS if getattr(args, d, None) is not None}


def run(args: argparse.Namespace) -> int:
    from navigator.console import Reporter
    from navigator.triton import emit, from_mapping

    options = from_mapping(options_from_args(args), source="navigator triton")
    result = emit(args.workspace, options)
    reporter = Reporter("quiet" if getattr(args, "quiet", False) else "auto")
    for line in result.lines():
        reporter.info(line)
    return 0
