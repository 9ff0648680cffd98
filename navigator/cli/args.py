"""Argument groups shared between subcommands. Each adds its options to a
parser and turns the parsed namespace back into config options (snake_case
keys that :func:`navigator.config.from_mapping` understands)."""

from __future__ import annotations

import argparse

from navigator.config import DEFAULT_MAX_BATCH_SIZE, DEFAULT_PROFILE_BUDGET_S, DEFAULT_TIMEOUT_S


class ArgGroup:
    title = ""
    dests: tuple[str, ...] = ()

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        raise NotImplementedError

    def options(self, args: argparse.Namespace) -> dict:
        # `is`, not `in (None, False)`: 0 == False, and --batch-dim 0 / --max-batch-size 0 must reach validation
        return {d: v for d in self.dests if (v := getattr(args, d, None)) is not None and v is not False}


class ModelArgs(ArgGroup):
    title = "model"
    dests = ("workdir", "model_name", "model_format", "signature_name", "task", "trust_remote_code", "targets",
             "target_precisions", "device", "force", "config_path", "triton_repo")

    def add_to(self, parser):
        g = parser.add_argument_group(self.title)
        g.add_argument("--workdir", help="folder holding <model>.nav.workspace/ (default ./navigator_workdir)")
        g.add_argument("--model-name", help="name of the workspace and Triton model (default: the file's stem)")
        g.add_argument("--model-format", help="the source's format when the path does not tell (onnx, savedmodel, "
                                              "huggingface)")
        g.add_argument("--signature", dest="signature_name", metavar="NAME",
                       help="the SavedModel signature to convert (default serving_default)")
        g.add_argument("--task", metavar="T", help="Hugging Face models: the task to load the checkpoint for "
                                                   "(default: from config.architectures), e.g. text-classification")
        g.add_argument("--trust-remote-code", action="store_true",
                       help="Hugging Face models: run the model code shipped in the folder (off by default)")
        g.add_argument("--targets", "--target-formats", dest="targets", metavar="K,…",
                       help="format keys to produce, e.g. onnx,onnx-optimized,openvino (default: per source)")
        g.add_argument("--target-precisions", metavar="P,…", help="fp32 (default), fp16, bf16, int8")
        g.add_argument("--device", choices=["auto", "cpu", "cuda"], help="where runners run (default auto)")
        g.add_argument("--force", action="store_true", help="redo every step")
        g.add_argument("--config-path", metavar="YAML", help="options from a YAML file (CLI flags win)")
        g.add_argument("--triton-repo", metavar="DIR", help="at the end, write the best format into this Triton "
                                                            "model repository (as navigator triton WS --repo DIR)")


class ShapeArgs(ArgGroup):
    title = "inputs and shapes"
    dests = ("shapes", "min_shapes", "opt_shapes", "max_shapes", "value_ranges", "dtypes", "samples",
             "sample_count", "batch_dim", "no_batching", "max_batch_size")

    def add_to(self, parser):
        g = parser.add_argument_group(self.title)
        for flag, text in (("--shapes", "sample shapes, e.g. ids:8x16,mask:8x16"),
                           ("--min-shapes", "profile minimum, trtexec syntax"),
                           ("--opt-shapes", "profile optimum"), ("--max-shapes", "profile maximum")):
            g.add_argument(flag, action="append", metavar="NAME:DxD,…",
                           help=text + " (repeat for several profiles)")
        g.add_argument("--value-ranges", metavar="NAME:LO,HI,…", help="value range of generated inputs")
        g.add_argument("--dtypes", metavar="NAME:DTYPE,…", help="dtypes of generated inputs")
        g.add_argument("--samples", metavar="DIR", help="folder of .npz batches (keys = input names)")
        g.add_argument("--sample-count", type=int, metavar="N", help="batches to take or generate (default 2)")
        b = g.add_mutually_exclusive_group()
        b.add_argument("--batch-dim", type=int, metavar="N", help="the batch dim (default: detected)")
        b.add_argument("--no-batching", action="store_true", help="the model has no batch dim")
        g.add_argument("--max-batch-size", type=int, metavar="N",
                       help=f"largest batch profiled (default {DEFAULT_MAX_BATCH_SIZE})")


class VerifyArgs(ArgGroup):
    title = "verification"
    dests = ("atol", "rtol", "compare", "output_kinds", "state", "allow_nan", "error_stat", "verify_batch_sizes",
             "allow_failures", "reference")

    def add_to(self, parser):
        g = parser.add_argument_group(self.title)
        g.add_argument("--atol", metavar="[NAME:]V,…", help="absolute tolerance, per output or for all")
        g.add_argument("--rtol", metavar="[NAME:]V,…", help="relative tolerance, per output or for all")
        g.add_argument("--compare", metavar="NAME:MODE[=V],…",
                       help="tolerance | exact | mismatch_fraction=P | cosine=X | quantized=E | top1=A | "
                            "detections=F1 | mask=IOU | skip, per output ('*' = all)")
        g.add_argument("--output-kinds", metavar="NAME:KIND,…",
                       help="what an output is, when its values do not say: probabilities | scores | detections | "
                            "logits | embedding | tensor (inferred by default; lossy precisions are judged by "
                            "kind: top-1 agreement, detections F1, row cosine, score-map IoU)")
        g.add_argument("--state", metavar="IN=OUT,…",
                       help="state inputs and the outputs their next values come back as (found by name by "
                            "default: state/stateN, h0/hn, past_*/present_*): the model is verified over "
                            "sequences, each format carrying its own state, and served with Triton's sequence "
                            "batcher")
        g.add_argument("--error-stat", choices=["elemwise", "max", "mean", "median", "quantile"],
                       help="statistic the tolerance applies to (default elemwise)")
        g.add_argument("--allow-nan", action="store_true", help="NaN passes where the reference has NaN")
        g.add_argument("--verify-batch-sizes", metavar="B,…", help="batch sizes to verify at (default 1 and the "
                                                                   "samples' batch)")
        g.add_argument("--allow-failures", action="store_true", help="exit 0 even when a target fails")
        g.add_argument("--reference", metavar="KEY", help="take the reference outputs from this format (e.g. a "
                                                          "TensorRT engine when onnxruntime cannot run a plugin op)")


class ProfileArgs(ArgGroup):
    title = "profiling and limits"
    dests = ("timeout", "profile_budget_s", "no_profile", "runners", "profile_batch_sizes", "worker_memory_gb", "jobs",
             "no_race", "no_warm_workers")

    def add_to(self, parser):
        g = parser.add_argument_group(self.title)
        g.add_argument("--timeout", type=float, metavar="S",
                       help=f"limit per stage and format (default {DEFAULT_TIMEOUT_S:g} s)")
        g.add_argument("--worker-memory-gb", type=float, metavar="GIB",
                       help="kill a worker whose resident memory exceeds this; its stage fails (default: 75%% "
                            "of the machine's memory; 0: no limit)")
        g.add_argument("--profile-budget-s", type=float, metavar="S",
                       help=f"profiling time per format (default {DEFAULT_PROFILE_BUDGET_S:g})")
        g.add_argument("--no-profile", action="store_true", help="verify only; best by preference order")
        g.add_argument("--jobs", type=int, metavar="N", help="formats converted and verified at once (default: one "
                                                             "per free core, bounded by memory); profiling runs alone")
        g.add_argument("--no-race", action="store_true", help="profile every (format, runner) to full depth in its "
                                                              "own worker instead of racing them")
        g.add_argument("--no-warm-workers", action="store_true",
                       help="start each worker as a fresh interpreter, not as a fork of a server that imported "
                            "the frameworks once")
        g.add_argument("--profile-batch-sizes", metavar="B,…",
                       help="measure exactly these batch sizes (default: 1, 4, 16 … until the gain is < 5%%, "
                            "then the peak's two doubling neighbours, up to --max-batch-size)")
        g.add_argument("--runners", metavar="R,…", help="only these runners, e.g. onnxruntime,torch,torchscript "
                                                        "(default: every runner of each format)")


class TensorRTArgs(ArgGroup):
    title = "TensorRT engines (targets tensorrt, tensorrt_rtx, torch_tensorrt)"
    dests = ("trt_plugins", "trt_workspace_mb", "trt_opt_level", "trt_version_compatible")

    def add_to(self, parser):
        g = parser.add_argument_group(self.title, "Several optimization profiles: repeat --min/--opt/--max-shapes, "
                                                  "one set per profile. Reduced precision: --target-precisions "
                                                  "fp16,int8 (built from the onnx-fp16 / onnx-int8 graphs).")
        g.add_argument("--trt-plugins", metavar="LIB.so,…", help="TensorRT plugin libraries, loaded before parsing; "
                                                                 "also written to reproduce.sh and engine.yaml's "
                                                                 "Triton notes")
        g.add_argument("--trt-workspace-mb", type=int, metavar="MIB", help="builder workspace memory limit "
                                                                          "(default 8192)")
        g.add_argument("--trt-opt-level", type=int, metavar="0-5", help="builder optimisation level (default 3)")
        g.add_argument("--trt-version-compatible", action="store_true",
                       help="TensorRT: build engines that also load on later TensorRT of the same major version "
                            "(Triton: --backend-config=tensorrt,version-compatible=true)")
