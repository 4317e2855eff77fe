#!/usr/bin/env bash
# Stop the dev cluster started by up.sh: cancel every job still on it and wait (bounded) until
# SLURM has ended them, stop only the daemons named by its pid files (sshd, slurmd, slurmctld,
# slurmdbd, mariadbd, munged), then end any job process left behind — a slurmstepd and its
# descendants, or a process of a job of this cluster (SLURM_JOB_ID and this cluster's SLURM_CONF
# in its environment) — so no payload keeps computing without a controller.
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

# Descendants of a process (children first found through /proc).
descendants() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do
    echo "$child"
    descendants "$child"
  done
}

# Processes of jobs of this cluster: every slurmstepd with its descendants, and any process whose
# environment names a SLURM job and this cluster's slurm.conf (orphans of a dead slurmstepd).
job_processes() {
  local pid env
  for pid in $(pgrep -x slurmstepd 2>/dev/null); do
    echo "$pid"
    descendants "$pid"
  done
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    env=$'\n'$({ tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null)$'\n' || continue
    [[ $env == *$'\n'SLURM_JOB_ID=* && $env == *$'\n'"SLURM_CONF=$SLURM_CONF"$'\n'* ]] &&
      echo "$pid"
  done
  return 0
}

kill_job_processes() {
  local pids
  mapfile -t pids < <(job_processes | sort -un)
  ((${#pids[@]})) || return 0
  log "ending ${#pids[@]} job process(es) left behind: ${pids[*]}"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  local end=$((SECONDS + 10))
  while ((SECONDS < end)) && kill -0 "${pids[@]}" 2>/dev/null; do sleep 0.2; done
  kill -KILL "${pids[@]}" 2>/dev/null || true
  end=$((SECONDS + 10))
  while ((SECONDS < end)) && [[ -n "$(job_processes)" ]]; do sleep 0.2; done
}

if [[ -d "$DIR/run" ]]; then
  if live_pid slurmctld slurmctld >/dev/null; then
    # By id: SLURM 22.05's `scancel --state` takes one state, and a list cancels nothing.
    jobs="$(timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ')"
    if [[ -n "${jobs// /}" ]]; then
      log "cancelling jobs $jobs"
      # shellcheck disable=SC2086
      timeout 10 scancel $jobs >/dev/null 2>&1 || true
    fi
    # scancel only asks: wait (bounded) until slurmd has ended the jobs' steps.
    end=$((SECONDS + 30))
    while ((SECONDS < end)) && [[ -n "$(timeout 5 squeue -h -o %i 2>/dev/null)" ]]; do
      sleep 0.5
    done
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
kill_job_processes
if [[ -L /etc/slurm/slurm.conf && "$(readlink /etc/slurm/slurm.conf)" == "$DIR/etc/slurm.conf" ]]; then
  rm -f /etc/slurm/slurm.conf
fi
if [[ "${1:-}" == "--purge" ]]; then
  rm -rf "$DIR"
  log "removed $DIR"
fi
