#!/usr/bin/env bash
# The GPU check (issue #36) in one script: on a bare GPU machine (Python 3.12, torch with CUDA,
# onnxruntime's CPU build, no polygraphy / onnx-graphsurgeon, no network) it installs what
# Navigator needs from a packed site folder carried in parts, then runs benchmarks/gpu_check.py
# (ResNet-50 and BERT-base on every GPU format) and writes its results under $OUT.
#
#   bash benchmarks/gpu_check.sh --pack      here: cp312 wheels -> .gpu/part*/, this checkout's wheel -> .gpu/nav
#   bash benchmarks/gpu_check.sh --pack-nav  here: this checkout's wheel again (carry .gpu/nav in the last call)
#   bash benchmarks/gpu_check.sh --stage     there, once per carried part: keep it in /tmp/nav-gpu
#   bash benchmarks/gpu_check.sh [ARGS]      there: unpack, install, run (ARGS go to gpu_check.py)
#   bash benchmarks/gpu_check.sh --cpu       here: the dry run, with .venv's Python and small models
#
# Why parts: onnxruntime-gpu's wheel is 256 MB and a device call carries 64 MiB; packed with xz
# the site folder is ~200 MB, so it travels as parts of PART_MB, one per call, and waits in
# /tmp/nav-gpu until the last arrives. .gpu/ must be ignored (.git/info/exclude) and carried.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
STAGE=${NAV_GPU_STAGE:-/tmp/nav-gpu}
PART_MB=${PART_MB:-56}
# pinned as .ci/constraints.txt pins them; onnxruntime-gpu 1.31.1 is a CUDA 13 build, as the image's torch
WHEELS=(onnxruntime-gpu==1.31.1 polygraphy==0.53.6 onnx_graphsurgeon==0.6.1 onnxconverter-common==1.16.0
        onnxslim==0.1.98 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0
        rpds-py==2026.9.1)
PLATFORM=(--python-version 3.12 --implementation cp --only-binary=:all: --platform manylinux_2_28_x86_64
          --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

pack() {
    local tmp
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    local wheels=("${WHEELS[@]}")
    # PACK_WITHOUT_ORT=1: a ~2 MB site for runs of the torch formats only (one part, one call)
    [ -z "${PACK_WITHOUT_ORT:-}" ] || wheels=("${WHEELS[@]:1}")
    python3 -m pip download -q --no-deps "${PLATFORM[@]}" -d "$tmp/wheels" "${wheels[@]}"
    python3 -m pip install -q --no-deps --no-compile "${PLATFORM[@]}" --target "$tmp/site" "$tmp"/wheels/*.whl
    rm -rf .gpu/part* && mkdir -p .gpu
    tar -C "$tmp/site" -cf - . | xz -T0 -6 > "$tmp/site.tar.xz"
    (cd "$tmp" && sha256sum site.tar.xz | cut -d' ' -f1 > site.sha256 && split -b "${PART_MB}M" -d site.tar.xz part.)
    local i=0 p
    for p in "$tmp"/part.*; do
        i=$((i + 1))
        mkdir -p ".gpu/part$i"
        mv "$p" ".gpu/part$i/"
        cp "$tmp/site.sha256" ".gpu/part$i/"
    done
    grep -qxF '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
    du -sh .gpu/part*
    nav
    echo "carry one of .gpu/part1 .. .gpu/part$i per device call, with --stage; the last call runs the check"
}

nav() {   # this checkout as a wheel, in .gpu/nav (small: made again before each device session)
    rm -rf .gpu/nav && mkdir -p .gpu/nav
    python3 -m pip wheel -q --no-deps -w .gpu/nav "$ROOT"
    rm -rf build navigator.egg-info
}

stage() {
    mkdir -p "$STAGE/parts"
    local found=0 p
    for p in .gpu/part*/part.*; do
        [ -e "$p" ] || continue
        cp "$p" "$STAGE/parts/" && found=$((found + 1))
        cp "$(dirname "$p")/site.sha256" "$STAGE/"
    done
    echo "staged $found part(s); $STAGE/parts holds $(ls "$STAGE/parts" | wc -l)"
}

install() {
    [ -f "$STAGE/site/.complete" ] && return 0
    stage
    local want got
    want=$(cat "$STAGE/site.sha256")
    got=$(cat "$STAGE"/parts/part.* | sha256sum | cut -d' ' -f1)
    if [ "$want" != "$got" ]; then
        echo "the packed site is incomplete (sha256 $got, want $want): stage every part first" >&2
        exit 2
    fi
    rm -rf "$STAGE/site" && mkdir -p "$STAGE/site"
    cat "$STAGE"/parts/part.* | xz -d -T0 | tar -C "$STAGE/site" -xf -
    touch "$STAGE/site/.complete"
}

install_nav() {   # the navigator wheel carried in .gpu/nav, in a folder ahead of the packed site
    rm -rf "$STAGE/nav"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$STAGE/nav" .gpu/nav/*.whl
}

case "${1:-}" in
    --pack) pack ;;
    --pack-nav) nav ;;
    --install-only) install && install_nav && du -sh "$STAGE/site" "$STAGE/nav" ;;
    --stage) stage ;;
    --cpu)
        shift
        OUT=${OUT:-$(mktemp -d /tmp/gpu-check-cpu.XXXX)}
        exec "${PYTHON:-$ROOT/.venv/bin/python}" -P "$ROOT/benchmarks/gpu_check.py" --cpu --out "$OUT" "$@" ;;
    *)
        install
        install_nav
        export PYTHONPATH="$STAGE/nav:$STAGE/site${PYTHONPATH:+:$PYTHONPATH}"
        export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$STAGE/inductor}
        OUT=${OUT:-$STAGE/out}
        mkdir -p "$OUT"
        nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
        exec python3 -P "$ROOT/benchmarks/gpu_check.py" --out "$OUT" --workdir "$STAGE/work" "$@" ;;
esac
