#!/usr/bin/env bash
# Stop the one-node SLURM started by .ci/slurm/setup.sh: cancel jobs, stop slurmd, slurmctld, munged.
# Leaves packages and /etc/slurm/slurm.conf in place (setup.sh is idempotent). Set
# SLURM_CI_PURGE=1 to also delete the state folder (SLURM_CI_STATE, default /var/lib/slurm-ci).
set -uo pipefail

STATE=${SLURM_CI_STATE:-/var/lib/slurm-ci}

stop() {  # stop <daemon> <pidfile>: TERM the pid in its pid file, wait, then KILL
  local name=$1 pidfile=$2 pid
  pid=$(cat "$pidfile" 2>/dev/null || true)
  if [[ -z $pid ]] || ! kill -0 "$pid" 2>/dev/null; then
    echo "teardown.sh: $name not running (no live pid in $pidfile)"; return 0
  fi
  echo "teardown.sh: stopping $name (pid $pid)"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null || true
}

if command -v scancel >/dev/null 2>&1 && scontrol ping 2>/dev/null | grep -q UP; then
  scancel --user=root --quiet 2>/dev/null || true
fi
stop slurmd "$STATE/run/slurmd.pid"
stop slurmctld "$STATE/run/slurmctld.pid"
stop munged /run/munge/munged.pid
if [[ ${SLURM_CI_PURGE:-0} == 1 ]]; then rm -rf "$STATE"; echo "teardown.sh: removed $STATE"; fi
exit 0
