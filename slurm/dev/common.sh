# shellcheck shell=bash disable=SC2034
# Shared settings of the dev-cluster scripts (sourced by up.sh and down.sh).
# Everything lives under $SABER_SLURM_DIR; ports and the payload venv are overridable.
DIR="${SABER_SLURM_DIR:-/var/tmp/saber-slurm}"
SSH_PORT="${SABER_SLURM_SSH_PORT:-2222}"
DB_PORT="${SABER_SLURM_DB_PORT:-3307}"
CLUSTER="${SABER_SLURM_CLUSTER:-saberdev}"
PROJECT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${SABER_SLURM_VENV:-$PROJECT/.venv}"
VLLM_VENV="${SABER_SLURM_VLLM_VENV:-$PROJECT/.venv-vllm}"
export SLURM_CONF="$DIR/etc/slurm.conf"
CONTROL_SOCKET="${DAGSTER_SLURM_SSH_CONTROL_DIR:-$HOME/.ssh/dagster-slurm}/cm-root@127.0.0.1:$SSH_PORT"

log() { printf '[slurm-dev %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# pid of a daemon we started, if its pid file names a live process of the expected program.
live_pid() {
  local pidfile="$DIR/run/$1.pid" comm="$2" pid
  [[ -s "$pidfile" ]] || return 1
  pid="$(tr -dc '0-9' <"$pidfile")"
  [[ -n "$pid" && -r "/proc/$pid/comm" ]] || return 1
  [[ "$(cat "/proc/$pid/comm")" == "$comm"* ]] || return 1
  echo "$pid"
}

# Wait (bounded) until a command succeeds.
wait_for() {
  local what="$1" seconds="$2"
  shift 2
  local end=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= end)); then
      log "timed out after ${seconds}s waiting for $what"
      return 1
    fi
    sleep 0.5
  done
}
