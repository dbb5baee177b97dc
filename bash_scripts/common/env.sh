# Sourced by the scripts under bash_scripts/ (not run on its own). Sets:
#   ROOT    the repository root, whatever the caller's directory: repository files (default models,
#           data, data/*.py) are named from it, while paths given as arguments or environment
#           overrides (savepath, DATA=...) stay relative to the caller's directory;
#   PYTHON  unless already set: the project's .venv/bin/python when it exists, else python;
#           ROOT is put on PYTHONPATH so that `-m osd.train` imports this checkout;
#   EXTRA   (by osd_extra_args) the array of EXTRA_ARGS words, split as xargs does: quotes and
#           backslashes group words, nothing is expanded or run, e.g.
#           EXTRA_ARGS='--run_name "my run" --max_steps 10' gives 4 words.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python; fi
fi
case ":${PYTHONPATH:-}:" in *":$ROOT:"*) ;; *) export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" ;; esac

osd_extra_args() {
    EXTRA=()
    if ! printf '%s' "${EXTRA_ARGS:-}" | xargs -r printf '' >/dev/null 2>&1; then
        echo "EXTRA_ARGS=${EXTRA_ARGS}: unmatched quote; quote words with spaces, e.g. EXTRA_ARGS='--run_name \"my run\"'" >&2
        exit 2
    fi
    mapfile -d '' -t EXTRA < <(printf '%s' "${EXTRA_ARGS:-}" | xargs -r printf '%s\0')
}
