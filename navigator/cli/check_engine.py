"""navigator check-engine PLAN [--triton YY.MM]: will this TensorRT engine load?

Reads the builder and its version from the plan's header (no GPU, no
TensorRT needed) and, with --triton, compares it with the TensorRT that
Triton release ships (navigator's table; -py3 images). A TensorRT engine
loads only with the TensorRT version that built it, on the same GPU
architecture; otherwise the server logs "Serialization assertion
safeVersionRead == kSAFE_SERIALIZATION_VERSION failed. Version tag does not
match" and the model stays unavailable. PLAN is a .plan file or a format
folder holding model.plan (its engine.yaml, when present, tells whether the
engine is version-compatible). Exit 0 when it will load (or, without
--triton, when the header was read), 1 when it will not or cannot be told,
2 on bad input.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.strip()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("plan", metavar="PLAN", help="a TensorRT plan file, or a folder holding model.plan")
    parser.add_argument("--triton", metavar="YY.MM", help="the Triton release to check against, e.g. 24.09")
    parser.add_argument("--version-compatible", action="store_true", default=None,
                        help="the engine was built version-compatible (default: engine.yaml beside the plan says)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _engine_yaml(plan) -> dict:
    from pathlib import Path

    import yaml

    p = Path(plan)
    folder = p if p.is_dir() else p.parent
    from navigator.errors import UserInputError
    from navigator.workspace.atomic import read_regular

    try:
        return yaml.safe_load(read_regular(folder / "engine.yaml", 1 << 20).decode("utf-8")) or {}
    except (OSError, UnicodeDecodeError, UserInputError, yaml.YAMLError):
        return {}


def run(args: argparse.Namespace) -> int:
    import json

    from navigator.tools import engine

    header = engine.read_header(args.plan)
    info = _engine_yaml(args.plan)
    version_compatible = bool(info.get("version_compatible")) if args.version_compatible is None \
        else args.version_compatible
    out: dict = {"plan": str(args.plan), "builder": header.builder, "builder_version": header.version_text,
                 "bytes": header.size, "version_compatible": version_compatible}
    if header.compute_capabilities:
        out["compute_capabilities"] = list(header.compute_capabilities)
    lines = [f"{args.plan}: built by {header.display}" + (" (version-compatible)" if version_compatible else "")]
    if header.compute_capabilities:
        lines.append(f"  kernels for: {', '.join(header.compute_capabilities)}")
    code = 0
    if args.triton:
        release = engine.triton_release(args.triton)
        verdict = engine.check(header, release, version_compatible=version_compatible)
        out.update({"triton": release.release, "triton_tensorrt": ".".join(map(str, release.tensorrt))
                    if release.tensorrt else None, "verdict": verdict.status, "summary": verdict.summary,
                    "details": verdict.details, "cures": verdict.cures})
        mark = {"compatible": "loads", "incompatible": "will NOT load", "uncertain": "cannot tell"}[verdict.status]
        lines.append(f"Triton {release.release}: {mark}: {verdict.summary}")
        lines += [f"  - {d}" for d in verdict.details]
        if verdict.cures:
            lines.append("  cures:")
            lines += [f"  * {c}" for c in verdict.cures]
        code = verdict.exit_code
    elif not header.rtx:
        same = engine.releases_with(header.version)
        out["triton_releases"] = same
        lines.append("  Triton releases with this TensorRT version (navigator's table): "
                     + (", ".join(same) if same else "none known"))
    print(json.dumps(out, indent=1) if args.json else "\n".join(lines))
    return code
