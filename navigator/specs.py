"""Parsers for the small per-input / per-output spec strings on the command line.

All of them share one tokenizer:

* ``NAME`` is either *bare* -- one or more characters other than ``:`` ``,``
  ``'`` ``"`` and whitespace -- or *quoted* with ``'...'`` or ``"..."`` (any
  characters except the closing quote, so ``'x:0'`` and ``"a,b"`` work).
* ``:`` and ``,`` are punctuation; whitespace around tokens is ignored.
* Values (dimensions, numbers, dtypes, compare modes) must be bare words.

Grammars (``,`` separates entries)::

    --shapes        NAME:DxDx...        e.g. input:1x3x224x224,mask:1x16   (NAME:[] = 0-d scalar)
    --value-ranges  NAME:LOW,HIGH       e.g. ids:0,1000,mask:0,2
    --dtypes        NAME:DTYPE          e.g. ids:int32,x:float16
    --compare       NAME:MODE[=VALUE]   e.g. logits:tolerance,idx:mismatch_fraction=0.01,*:exact
    --atol/--rtol   NUMBER | NAME:NUMBER  e.g. 1e-4,logits:1e-3   (bare NUMBER -> key "")
    --batch-sizes   INT,INT,...         e.g. 1,2,4

Every malformed input raises :class:`navigator.errors.UserInputError` with a
one-line message that names the option and the offending token; no other
exception escapes a public function for any ``str`` input.
"""

from __future__ import annotations

from typing import Mapping

from navigator.errors import UserInputError
from navigator.spec_syntax import (  # noqa: F401 - MAX_DIM is part of this module's interface
    DIGITS_RE, MAX_DIM, SPECIAL, Cursor, check_dup, read_number, read_pos_int, show_token)
from navigator.validators.tolerances import MODES

__all__ = [
    "ALL_OUTPUTS",
    "COMPARE_MODES",
    "DTYPE_ALIASES",
    "DTYPES",
    "MAX_DIM",
    "format_name",
    "format_shape",
    "merge_profile",
    "parse_batch_sizes",
    "parse_compare",
    "parse_dtypes",
    "parse_shapes",
    "parse_tolerance",
    "parse_value_ranges",
]


ALL_OUTPUTS = "*"
"""Key used by :func:`parse_compare` for "every output"."""

DTYPES: tuple[str, ...] = (
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
)

DTYPE_ALIASES: dict[str, str] = {
    **{d: d for d in DTYPES},
    "fp32": "float32",
    "float": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp64": "float64",
    "double": "float64",
}

# mode -> (low, high) of its value; None means "no value allowed" (validators.tolerances.MODES).
COMPARE_MODES: dict[str, tuple[float, float] | None] = MODES

_USAGE = {
    "shapes": "expected NAME:DxDx..., e.g. input:1x3x224x224",
    "value_ranges": "expected NAME:LOW,HIGH, e.g. ids:0,1000,mask:0,2",
    "dtypes": "expected NAME:DTYPE, e.g. ids:int32,x:float16",
    "compare": (
        "expected NAME:MODE[=VALUE], e.g. logits:tolerance,idx:mismatch_fraction=0.01; "
        "modes: tolerance, exact, skip, mismatch_fraction=F, cosine=F, quantized=F, top1=F, detections=F, mask=F"
    ),
    "output_kinds": "expected NAME:KIND, e.g. probs:probabilities,output0:detections",
    "tolerance": "expected NUMBER or NAME:NUMBER, e.g. 1e-4,logits:1e-3",
    "batch_sizes": "expected positive integers, e.g. 1,2,4",
}


# --------------------------------------------------------------------------
# public parsers


def _parse_dims(cur: Cursor, tok: str) -> tuple[int, ...]:
    if tok == "[]":
        return ()
    dims: list[int] = []
    pos = 0
    pieces = tok.split("x")
    for k, piece in enumerate(pieces):
        if piece == "":
            rest = tok[pos:]
            if k == len(pieces) - 1 and k > 0:
                cur.fail(f"missing dimension after trailing 'x' in {cur.entry()}")
            cur.fail(f"bad dimension {show_token(rest)} in {cur.entry()}")
        if not DIGITS_RE.fullmatch(piece):
            cur.fail(f"bad dimension {show_token(piece)} in {cur.entry()}")
        dims.append(read_pos_int(cur, piece, "dimension"))
        pos += len(piece) + 1
    return tuple(dims)


def parse_shapes(text: str, option: str = "--shapes") -> dict[str, tuple[int, ...]]:
    """Parse trtexec-style ``name:1x3x224x224,other:1x16`` (``name:[]`` = scalar)."""
    cur = Cursor(text, option, _USAGE["shapes"])
    out: dict[str, tuple[int, ...]] = {}
    while True:
        cur.begin_entry()
        name = cur.name()
        cur.colon(name)
        out_dims = _parse_dims(cur, cur.value("dimensions", name))
        check_dup(cur, out, name)
        out[name] = out_dims
        if not cur.next_entry():
            return out


def parse_value_ranges(
    text: str, option: str = "--value-ranges"
) -> dict[str, tuple[float, float]]:
    """Parse ``ids:0,1000,mask:0,2`` into ``{name: (low, high)}`` with low < high."""
    cur = Cursor(text, option, _USAGE["value_ranges"])
    out: dict[str, tuple[float, float]] = {}
    while True:
        cur.begin_entry()
        name = cur.name()
        cur.colon(name)
        lo_tok = cur.value("low value", name)
        cur.comma(f"low value {show_token(lo_tok)} of {show_token(name)}")
        hi_tok = cur.value("high value", name)
        lo = read_number(cur, lo_tok, "low value")
        hi = read_number(cur, hi_tok, "high value")
        if not lo < hi:
            cur.fail(f"low {lo_tok} >= high {hi_tok} in {cur.entry()} (need low < high)")
        check_dup(cur, out, name)
        out[name] = (lo, hi)
        if not cur.next_entry():
            return out


def parse_dtypes(text: str, option: str = "--dtypes") -> dict[str, str]:
    """Parse ``ids:int32,x:fp16`` into canonical numpy dtype names."""
    cur = Cursor(text, option, _USAGE["dtypes"])
    out: dict[str, str] = {}
    while True:
        cur.begin_entry()
        name = cur.name()
        cur.colon(name)
        tok = cur.value("dtype", name)
        canonical = DTYPE_ALIASES.get(tok.lower())
        if canonical is None:
            cur.fail(
                f"unknown dtype {show_token(tok)} in {cur.entry()}; allowed: "
                + ", ".join(DTYPES)
                + " (aliases: fp32, float, fp16, half, bf16, fp64, double)"
            )
        check_dup(cur, out, name)
        out[name] = canonical
        if not cur.next_entry():
            return out


def parse_state(text: str, option: str = "--state") -> dict[str, str]:
    """Parse ``state=stateN,h0=hn`` (input = the output its next value comes back as) into
    ``{input: output}``. Names holding ',' or '=' go in a config file's ``state:`` mapping."""
    if not isinstance(text, str) or not text.strip():
        raise UserInputError(f"{option}: expected IN=OUT[,IN=OUT...], e.g. state=stateN,h0=hn")
    out: dict[str, str] = {}
    for entry in text.split(","):
        name, eq, value = (part.strip() for part in entry.partition("="))
        if not eq or not name or not value or "=" in value:
            raise UserInputError(f"{option}: {entry.strip()!r} is not IN=OUT (e.g. state=stateN,h0=hn)")
        if name in out:
            raise UserInputError(f"{option}: input {name!r} given twice")
        out[name] = value
    return out


def parse_output_kinds(text: str, option: str = "--output-kinds") -> dict[str, str]:
    """Parse ``probs:probabilities,output0:detections`` (navigator.validators.kinds.KINDS)."""
    from navigator.validators.kinds import KINDS

    cur = Cursor(text, option, _USAGE["output_kinds"])
    out: dict[str, str] = {}
    while True:
        cur.begin_entry()
        name = cur.name()
        cur.colon(name)
        tok = cur.value("output kind", name).lower()
        if tok not in KINDS:
            cur.fail(f"unknown output kind {show_token(tok)} in {cur.entry()}; allowed: {', '.join(KINDS)}")
        check_dup(cur, out, name)
        out[name] = tok
        if not cur.next_entry():
            return out


def parse_compare(
    text: str, option: str = "--compare"
) -> dict[str, tuple[str, float | None]]:
    """Parse ``logits:tolerance,idx:mismatch_fraction=0.01,*:exact``.

    Returns ``{name: (mode, value)}``; ``value`` is None for tolerance, exact
    and skip. The key ``"*"`` (see :data:`ALL_OUTPUTS`) means every output.
    """
    cur = Cursor(text, option, _USAGE["compare"])
    out: dict[str, tuple[str, float | None]] = {}
    while True:
        cur.begin_entry()
        name = cur.name()
        cur.colon(name)
        tok = cur.value("compare mode", name)
        mode, eq, raw = tok.partition("=")
        mode_key = mode.lower()
        if mode_key not in COMPARE_MODES:
            cur.fail(
                f"unknown compare mode {show_token(mode)} in {cur.entry()}; allowed: "
                + ", ".join(COMPARE_MODES)
            )
        bounds = COMPARE_MODES[mode_key]
        value: float | None = None
        if bounds is None:
            if eq:
                cur.fail(f"compare mode {show_token(mode)} takes no value, got {show_token(tok)} in {cur.entry()}")
        else:
            if not eq:
                cur.fail(
                    f"compare mode {show_token(mode)} needs a value, e.g. {mode_key}=0.99, in {cur.entry()}"
                )
            value = read_number(cur, raw, f"{mode_key} value")
            lo, hi = bounds
            if not lo <= value <= hi:
                cur.fail(
                    f"{mode_key} value {show_token(raw)} in {cur.entry()} is outside [{lo:g}, {hi:g}]"
                )
        check_dup(cur, out, name)
        out[name] = (mode_key, value)
        if not cur.next_entry():
            return out


def parse_tolerance(text: str, option: str = "--atol") -> dict[str, float]:
    """Parse ``1e-3`` -> ``{"": 1e-3}`` or ``1e-4,logits:1e-3`` (``""`` = default)."""
    cur = Cursor(text, option, _USAGE["tolerance"])
    out: dict[str, float] = {}
    while True:
        cur.begin_entry()
        first = cur.peek()
        following = cur.peek(1)
        if (
            first is not None
            and first.kind == "word"
            and not first.quoted
            and (following is None or following.kind == ",")
        ):
            tok = cur.take().text
            key = ""
            if key in out:
                cur.fail(f"more than one default tolerance ({show_token(tok)}) in {show_token(cur.text)}")
        else:
            key = cur.name()
            cur.colon(key)
            tok = cur.value("tolerance", key)
            check_dup(cur, out, key)
        value = read_number(cur, tok, "tolerance")
        if value < 0:
            cur.fail(f"negative tolerance {show_token(tok)} in {cur.entry()} (must be >= 0)")
        out[key] = value + 0.0  # normalise -0.0
        if not cur.next_entry():
            return out


def parse_batch_sizes(text: str, option: str = "--batch-sizes") -> tuple[int, ...]:
    """Parse ``1,2,4`` into a sorted tuple of unique positive ints."""
    cur = Cursor(text, option, _USAGE["batch_sizes"])
    sizes: set[int] = set()
    while True:
        cur.begin_entry()
        tok = cur.value("batch size", None)
        sizes.add(read_pos_int(cur, tok, "batch size"))
        if not cur.next_entry():
            return tuple(sorted(sizes))


# --------------------------------------------------------------------------
# formatting


def format_shape(shape: tuple[int, ...]) -> str:
    """``(1, 3, 224, 224)`` -> ``"1x3x224x224"``; ``()`` -> ``"[]"``."""
    if len(shape) == 0:
        return "[]"
    return "x".join(str(int(d)) for d in shape)


def format_name(name: str) -> str:
    """Return ``name`` as the tokenizer reads it back, quoting it if needed."""
    if not isinstance(name, str) or not name:
        raise UserInputError(f"cannot format name {show_token(str(name))}: names must be non-empty strings")
    if not any(c in SPECIAL or c.isspace() for c in name):
        return name
    if "'" not in name:
        return f"'{name}'"
    if '"' not in name:
        return f'"{name}"'
    raise UserInputError(
        f"name {show_token(name)} contains both quote characters and cannot be written in a spec"
    )


# --------------------------------------------------------------------------
# shape profiles

_PROFILE_OPTIONS = (("min", "--min-shapes"), ("opt", "--opt-shapes"), ("max", "--max-shapes"))


def merge_profile(
    min_shapes: Mapping[str, tuple[int, ...]] | None,
    opt_shapes: Mapping[str, tuple[int, ...]] | None,
    max_shapes: Mapping[str, tuple[int, ...]] | None,
) -> dict[str, dict[str, tuple[int, ...]]]:
    """Combine ``--min/opt/max-shapes`` into ``{name: {"min", "opt", "max"}}``.

    All three empty -> ``{}``. Otherwise every name must appear in all three,
    with equal rank and ``min <= opt <= max`` per dimension.
    """
    given = {
        "min": dict(min_shapes or {}),
        "opt": dict(opt_shapes or {}),
        "max": dict(max_shapes or {}),
    }
    names: list[str] = []
    for key, _ in _PROFILE_OPTIONS:
        for name in given[key]:
            if name not in names:
                names.append(name)

    out: dict[str, dict[str, tuple[int, ...]]] = {}
    for name in names:
        for key, opt_name in _PROFILE_OPTIONS:
            if name not in given[key]:
                raise UserInputError(f"{opt_name} is missing for {show_token(name)}")
        prof = {key: tuple(given[key][name]) for key, _ in _PROFILE_OPTIONS}
        ranks = {key: len(s) for key, s in prof.items()}
        if len(set(ranks.values())) != 1:
            raise UserInputError(
                f"shape profile for {show_token(name)}: rank mismatch: "
                + ", ".join(f"{k} {format_shape(prof[k])} (rank {ranks[k]})" for k in prof)
            )
        for lo, hi in (("min", "max"), ("min", "opt"), ("opt", "max")):
            for dim, (a, b) in enumerate(zip(prof[lo], prof[hi])):
                if a > b:
                    raise UserInputError(
                        f"shape profile for {show_token(name)}: {lo} {format_shape(prof[lo])} > "
                        f"{hi} {format_shape(prof[hi])} at dim {dim}"
                    )
        out[name] = prof
    return out
