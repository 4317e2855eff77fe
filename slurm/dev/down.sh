#!/usr/bin/env bash
# Stop the dev cluster started by up.sh: only the daemons named by its pid files (sshd, slurmd,
# slurmctld, slurmdbd, mariadbd, munged), after cancelling the jobs still on the dev cluster.
# State under $SABER_SLURM_DIR is kept (next `up.sh` is fast); `down.sh --purge` removes it.
set -euo pipefail
# shellcheck source=slurm/dev/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

stop() {
  local name="$1" comm="$2" pid
  pid="$(live_pid "$name" "$comm")" || {
    rm -f "$DIR/run/$name.pid"
    return 0
  }
  kill -TERM "$pid" 2>/dev/null || true
  local end=$((SECONDS + 20))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < end)); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name ($pid) ignored TERM; killing"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/run/$name.pid"
  log "stopped $name ($pid)"
}

if [[ -d "$DIR/run" ]]; then
  if live_pid slurmctld slurmctld >/dev/null; then
    timeout 10 scancel --full --state=PENDING,RUNNING,SUSPENDED >/dev/null 2>&1 || true
  fi
  ssh -o ControlPath="$CONTROL_SOCKET" -O exit root@127.0.0.1 >/dev/null 2>&1 || true
  rm -f "$CONTROL_SOCKET"
  stop sshd sshd
  stop slurmd slurmd
  stop slurmctld slurmctld
  stop slurmdbd slurmdbd
  stop mariadb mariadbd
  stop munged munged
fi
if [[ -L /etc/slurm/slurm.conf && "$(readlink /etc/slurm/slurm.conf)" == "$DIR/etc/slurm.conf" ]]; then
  rm -f /etc/slurm/slurm.conf
fi
if [[ "${1:-}" == "--purge" ]]; then
  rm -rf "$DIR"
  log "removed $DIR"
fi
