"""TensorRT plan files without a GPU: the header's builder version, the
Triton release <-> TensorRT version table, and whether an engine will load
in a given Triton release.

A plan records the TensorRT version that built it in its first bytes, so
this module reads them instead of deserialising the engine (which needs the
exact TensorRT version and a GPU):

* bytes 0-3: the magic, ``ftrt`` for TensorRT (also ``ptrt``, seen by
  Netron's reader) and ``vtrt`` for TensorRT-RTX (observed here on plans
  built by TensorRT-RTX 1.7);
* bytes 24-27: major, minor, patch, build (TensorRT >= 8.6 and TensorRT-RTX).

Nothing here imports TensorRT.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from navigator.errors import UserInputError

TENSORRT, TENSORRT_RTX = "tensorrt", "tensorrt_rtx"   # the builders, named as their formats
MAGICS = {b"ftrt": TENSORRT, b"ptrt": TENSORRT, b"vtrt": TENSORRT_RTX}
HEADER_BYTES = 32

# TensorRT-RTX 1.x plans (magic vtrt) keep a bit set of the compute capabilities
# they hold kernels for at byte 32. Observed with tensorrt-rtx 1.7.1 by building
# with one ComputeCapability at a time: bit 0 SM75, 1 SM80, 2 SM86, 3 SM89,
# 4 SM120, 5 SM121; the builder's default set was 0x7e (bit 6 unknown).
_RTX_CC_BITS = {0: "SM75", 1: "SM80", 2: "SM86", 3: "SM89", 4: "SM120", 5: "SM121"}


@dataclass(frozen=True)
class PlanHeader:
    builder: str                          # tensorrt | tensorrt_rtx
    version: tuple[int, int, int, int]    # major, minor, patch, build
    magic: str
    size: int
    compute_capabilities: tuple[str, ...] = ()   # TensorRT-RTX plans only (see _RTX_CC_BITS)

    @property
    def version_text(self) -> str:
        return ".".join(str(v) for v in self.version)

    @property
    def rtx(self) -> bool:
        """Built by TensorRT-RTX, whose plans Triton's TensorRT backend never loads."""
        return self.builder == TENSORRT_RTX

    @property
    def display(self) -> str:
        return f"{'TensorRT-RTX' if self.rtx else 'TensorRT'} {self.version_text}"


def parse_header(data: bytes, *, size: int | None = None) -> PlanHeader:
    """The builder and its version from the first bytes of a plan."""
    if len(data) < 28:
        raise UserInputError(f"not a TensorRT plan: {len(data)} bytes is shorter than a plan header")
    magic = bytes(data[:4])
    if magic not in MAGICS:
        raise UserInputError(f"not a TensorRT plan: it starts with {magic!r}, a plan starts with 'ftrt' "
                             "(TensorRT) or 'vtrt' (TensorRT-RTX)")
    version = tuple(int(b) for b in data[24:28])
    if version[0] == 0:
        raise UserInputError("the plan header holds no builder version (TensorRT older than 8.6 did not write it)")
    builder = MAGICS[magic]
    ccs: tuple[str, ...] = ()
    if builder == TENSORRT_RTX and version[0] == 1 and len(data) >= 33:
        mask = data[32]
        ccs = tuple(name if name else f"unknown(bit {bit})" for bit in range(8) if mask >> bit & 1
                    for name in [_RTX_CC_BITS.get(bit)])
    return PlanHeader(builder=builder, version=version, magic=magic.decode("ascii"),  # type: ignore[arg-type]
                      size=size if size is not None else len(data), compute_capabilities=ccs)


def read_header(path: str | Path) -> PlanHeader:
    """The header of the plan at ``path`` (a file, or a folder holding model.plan)."""
    p = Path(path)
    if p.is_dir():
        p = p / "model.plan"
    from navigator.workspace.atomic import open_regular

    try:
        with open_regular(p) as f:
            head = f.read(64)
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        raise UserInputError(f"{p}: no such file") from None
    except OSError as e:
        raise UserInputError(f"{p}: cannot read ({e.strerror or e})") from None
    try:
        return parse_header(head, size=size)
    except UserInputError as e:
        raise UserInputError(f"{p}: {e.message}") from None


# --------------------------------------------------------------------------- the Triton table
@dataclass(frozen=True)
class TritonRelease:
    release: str                           # YY.MM, the container tag
    tensorrt: tuple[int, int, int] | None  # None: not known to this table
    confirmed: bool                        # seen in NVIDIA's documents while writing the table


# TensorRT in the `nvcr.io/nvidia/tritonserver:<YY.MM>-py3` containers.
# Sources: NVIDIA's Frameworks Support Matrix and the Triton release notes
# (docs.nvidia.com/deeplearning/frameworks/support-matrix/,
# docs.nvidia.com/deeplearning/triton-inference-server/release-notes/). Rows
# marked True were confirmed against a document while writing this table:
#   24.03 8.6.3 and "24.05-py3 has TensorRT 10" (release-note discussions of 24.03/24.05),
#   24.05 10.0.1, 24.09 10.4.0, 25.01 10.8.0 (Triton's compatibility page, which
#   lists the -trtllm-python-py3 images; they agree with -py3 for these months).
# The others are from the support matrix as remembered, not re-checked here:
# check-engine says so. The -trtllm-python-py3 images can ship another TensorRT
# (e.g. 25.09-trtllm lists 10.11.0) - this table is for -py3 only. 26.xx
# releases exist (26.09 is Triton 2.73) but their TensorRT versions (likely 11.x)
# are not in this table.
_TABLE: dict[str, tuple[tuple[int, int, int] | None, bool]] = {
    "23.01": ((8, 5, 2), False), "23.02": ((8, 5, 3), False), "23.03": ((8, 5, 3), False),
    "23.04": ((8, 6, 1), False), "23.05": ((8, 6, 1), False), "23.06": ((8, 6, 1), False),
    "23.07": ((8, 6, 1), False), "23.08": ((8, 6, 1), False), "23.09": ((8, 6, 1), False),
    "23.10": ((8, 6, 1), False), "23.11": ((8, 6, 1), False), "23.12": ((8, 6, 1), False),
    "24.01": ((8, 6, 1), False), "24.02": ((8, 6, 3), False), "24.03": ((8, 6, 3), True),
    "24.04": ((8, 6, 3), False), "24.05": ((10, 0, 1), True), "24.06": ((10, 1, 0), False),
    "24.07": ((10, 2, 0), False), "24.08": ((10, 3, 0), False), "24.09": ((10, 4, 0), True),
    "24.10": ((10, 5, 0), False), "24.11": ((10, 6, 0), False), "24.12": ((10, 7, 0), False),
    "25.01": ((10, 8, 0), True), "25.02": ((10, 8, 0), False), "25.03": ((10, 9, 0), False),
    "25.04": ((10, 9, 0), False), "25.05": ((10, 10, 0), False), "25.06": ((10, 11, 0), False),
    "25.07": ((10, 11, 0), False), "25.08": ((10, 13, 2), False), "25.09": ((10, 13, 3), False),
    "25.10": ((10, 13, 3), False), "25.11": ((10, 14, 1), False), "25.12": ((10, 14, 1), False),
}
_RELEASE = re.compile(r"^(\d\d)\.(\d\d)$")


def triton_releases() -> list[TritonRelease]:
    return [TritonRelease(r, v, c) for r, (v, c) in _TABLE.items()]


def triton_release(text: str) -> TritonRelease:
    """The table's row for ``24.09`` (also ``24.09-py3`` or
    ``nvcr.io/nvidia/tritonserver:24.09-py3``); an unknown but well-formed
    release has ``tensorrt=None``."""
    tag = str(text).strip().rsplit(":", 1)[-1]
    if tag.endswith("-py3"):
        tag = tag[:-4]
    m = _RELEASE.match(tag)
    if not m or not 1 <= int(m.group(2)) <= 12:
        raise UserInputError(f"--triton {text!r}: expected a Triton container release YY.MM such as 24.09")
    if "trtllm" in str(text):
        raise UserInputError(f"--triton {text!r}: the -trtllm-python-py3 images ship their own TensorRT; this "
                             "table covers the -py3 images only")
    version, confirmed = _TABLE.get(tag, (None, False))
    return TritonRelease(tag, version, confirmed)


def releases_with(version: tuple[int, ...]) -> list[str]:
    """Triton releases whose TensorRT has the same major.minor.patch as ``version``."""
    return [r for r, (v, _) in _TABLE.items() if v is not None and tuple(v) == tuple(version[:3])]


# --------------------------------------------------------------------------- verdicts
VERSION_TAG_ERROR = ("Serialization assertion safeVersionRead == kSAFE_SERIALIZATION_VERSION failed. "
                     "Version tag does not match")


@dataclass
class Verdict:
    status: str              # compatible | incompatible | uncertain
    summary: str
    details: list[str] = field(default_factory=list)
    cures: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if self.status == "compatible" else 1


def _rebuild_cure(release: str, key_dir: str | None) -> str:
    where = f"{key_dir}/reproduce.sh" if key_dir else "the format's reproduce.sh"
    return (f"rebuild the engine with Triton {release}'s TensorRT: run the trtexec line of {where} inside "
            f"nvcr.io/nvidia/tritonserver:{release}-py3 (or nvcr.io/nvidia/tensorrt:{release}-py3, same month, "
            f"same TensorRT), on the GPU model you will serve on")


def _vc_cure(release: str) -> str:
    return ("or build a version-compatible engine (--trt-version-compatible; trtexec --versionCompatible) with a "
            f"TensorRT no newer than Triton {release}'s and of the same major version, and start the server with "
            "--backend-config=tensorrt,version-compatible=true")


def check(header: PlanHeader, release: TritonRelease, *, version_compatible: bool = False,
          key_dir: str | None = None) -> Verdict:
    """Will the engine with ``header`` load in ``release``'s TensorRT backend?"""
    cures = [_rebuild_cure(release.release, key_dir)]
    if header.rtx:
        return Verdict("incompatible", f"a TensorRT-RTX {header.version_text} engine does not load in Triton's "
                       "TensorRT backend (platform tensorrt_plan), which runs TensorRT, not TensorRT-RTX",
                       [f"plan magic {header.magic!r} is TensorRT-RTX's"],
                       ["build a TensorRT engine (target tensorrt) for Triton's TensorRT backend, or serve this "
                        "engine with TensorRT-RTX's runtime from a Python-backend model"])
    plan = header.version[:3]
    if release.tensorrt is None:
        return Verdict("uncertain", f"the TensorRT version of Triton {release.release} is not in navigator's table",
                       [f"the engine was built by {header.display}; it loads only where the same TensorRT "
                        "version runs it (unless it is version-compatible)",
                        f"find the version with: docker run --rm nvcr.io/nvidia/tritonserver:{release.release}-py3 "
                        "bash -c 'ls /usr/lib/*-linux-gnu/libnvinfer.so.*'"], cures)
    ours = release.tensorrt
    shown = ".".join(map(str, ours))
    note = [] if release.confirmed else [f"Triton {release.release} -> TensorRT {shown} is from navigator's table, "
                                         "not re-checked against NVIDIA's support matrix"]
    if plan == ours:
        return Verdict("compatible", f"built by {header.display}; Triton {release.release} ships TensorRT {shown}: "
                       "the versions match",
                       note + ["the engine must also run on the GPU architecture it was built for (or have been "
                               "built hardware-compatible)"], [])
    mismatch = (f"built by {header.display}, but Triton {release.release} ships TensorRT {shown}: the server will "
                f"fail to load it with \"{VERSION_TAG_ERROR}\"")
    details = note + ["a TensorRT engine loads only with the TensorRT version that built it, on the same GPU "
                      "architecture; the version tag in the plan is checked when the engine is deserialised"]
    if version_compatible:
        if plan[0] == ours[0] and plan <= ours:
            return Verdict("compatible", f"built by {header.display} as a version-compatible engine; Triton "
                           f"{release.release} ships TensorRT {shown} (same major, not older)",
                           note + ["start the server with --backend-config=tensorrt,version-compatible=true "
                                   "(the engine embeds its lean runtime, which the backend must be allowed to run)"],
                           [])
        why = ("it is newer than the server's TensorRT" if plan[0] == ours[0]
               else "version compatibility holds within one major version")
        return Verdict("incompatible", mismatch + f"; being version-compatible does not help: {why}",
                       details, cures)
    if plan[:2] == ours[:2]:
        return Verdict("uncertain", f"built by {header.display}; Triton {release.release} ships TensorRT {shown}: "
                       "same major.minor, other patch release; TensorRT promises loading only with the exact "
                       "version that built the engine", details, cures + [_vc_cure(release.release)])
    return Verdict("incompatible", mismatch, details, cures + [_vc_cure(release.release)])
