# pip_install, sourced by .ci/install and .ci/run.
# A dropped connection must not fail CI (a run on record died after 21 s on a numpy wheel cut at
# 4.5 of 16.9 MB, six resumes in a row): pip retries connections and resumes a cut download
# (PIP_RESUME_RETRIES, pip >= 25.1; older pips ignore it), and each install is tried three times.
export PIP_RETRIES=10 PIP_TIMEOUT=60 PIP_RESUME_RETRIES=20
pip_install() {   # pip_install PYTHON ARGS...: `PYTHON -m pip install ARGS`, up to three tries
    local py=$1 try; shift
    for try in 1 2 3; do
        "$py" -m pip install "$@" && return 0
        [ "$try" = 3 ] || { echo "pip install failed (try $try of 3); again in $((30 * try)) s" >&2; sleep $((30 * try)); }
    done
    return 1
}
