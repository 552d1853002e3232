#!/usr/bin/env bash
# Start a real one-node SLURM cluster on this machine (for CI and for tests/cluster/test_slurm.py).
#
# Idempotent: re-running it reinstalls nothing that is present, rewrites the config only when it
# changed, and restarts only daemons that are not running. Works without systemd (CI containers):
# munged runs as user munge, slurmctld and slurmd are started by hand.
#
# Needs root and Debian/Ubuntu (apt). Environment knobs:
#   SLURM_CI_STATE   folder for state/spool/logs/pids (default /var/lib/slurm-ci)
#   SLURM_CI_WAIT    seconds to wait for the node to become idle (default 60)
#   SLURM_CI_NOAPT   set to 1 to skip apt-get (packages already installed)
#
# Why /etc/slurm/slurm.conf and not SLURM_CONF: snakemake-executor-plugin-slurm strips SLURM_*
# variables from the job environment, so srun inside a job would not find a config elsewhere.
set -euo pipefail

STATE=${SLURM_CI_STATE:-/var/lib/slurm-ci}
WAIT=${SLURM_CI_WAIT:-60}
CONF=/etc/slurm/slurm.conf

die() { echo "setup.sh: ERROR: $*" >&2; exit 1; }
log() { echo "setup.sh: $*"; }

[[ $(id -u) -eq 0 ]] || die "must run as root (it installs packages and starts daemons)"

# 1. Packages --------------------------------------------------------------------------------
need=()
for bin in munged slurmctld slurmd sinfo sbatch; do
  command -v "$bin" >/dev/null 2>&1 || need+=("$bin")
done
if ((${#need[@]})); then
  [[ ${SLURM_CI_NOAPT:-0} == 1 ]] && die "missing ${need[*]} and SLURM_CI_NOAPT=1"
  command -v apt-get >/dev/null 2>&1 || die "missing ${need[*]} and no apt-get to install them"
  log "installing munge slurmctld slurmd slurm-client (missing: ${need[*]})"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends munge slurmctld slurmd slurm-client >/dev/null \
    || die "apt-get install munge slurmctld slurmd slurm-client failed"
fi

# 2. Config ----------------------------------------------------------------------------------
cpus=$(nproc)
mem_mb=$(free -m | awk '/^Mem:/ {print $2}')
# Leave headroom for the OS and the daemons; slurmd refuses to register a node whose
# RealMemory exceeds what it measures.
real_mem=$(( mem_mb * 9 / 10 ))
((real_mem > 500)) || die "too little memory for a node (${mem_mb} MB)"

mkdir -p /etc/slurm "$STATE"/{ctld,spool,log,run}
tmp_conf=$(mktemp)
cat >"$tmp_conf" <<CONF
# Written by .ci/slurm/setup.sh: a one-node SLURM on localhost for CI. Do not edit by hand.
ClusterName=flatscore-ci
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
InactiveLimit=0
KillWait=10
MinJobAge=300
SlurmctldTimeout=60
SlurmdTimeout=60
Waittime=0
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$real_mem State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
conf_changed=0
if ! cmp -s "$tmp_conf" "$CONF"; then
  install -m 0644 "$tmp_conf" "$CONF"
  conf_changed=1
  log "wrote $CONF (CPUs=$cpus RealMemory=$real_mem)"
fi
rm -f "$tmp_conf"

# 3. munged ----------------------------------------------------------------------------------
if ! pgrep -x munged >/dev/null; then
  id munge >/dev/null 2>&1 || die "user munge does not exist (is the munge package installed?)"
  mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
  chown munge: /run/munge /var/log/munge /var/lib/munge
  if [[ ! -s /etc/munge/munge.key ]]; then
    if command -v mungekey >/dev/null 2>&1; then
      mungekey --create --keyfile=/etc/munge/munge.key
    else
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
  fi
  chown munge: /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  log "starting munged"
  if command -v runuser >/dev/null 2>&1; then
    runuser -u munge -- munged || die "munged failed to start (see /var/log/munge/munged.log)"
  else
    su -s /bin/sh munge -c munged || die "munged failed to start (see /var/log/munge/munged.log)"
  fi
fi
for _ in $(seq 20); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
munge -n 2>/dev/null | unmunge >/dev/null 2>&1 || die "munge credentials do not round-trip (munged not working)"

# 4. slurmctld / slurmd ----------------------------------------------------------------------
if ((conf_changed)); then
  # A changed config needs fresh daemons (node CPUs/memory are read at start).
  # Stopped by the pid files this script's config names (never by process name).
  for d in slurmd slurmctld; do
    pidfile=$STATE/run/$d.pid
    if [[ -s $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      log "restarting $d (config changed)"; kill "$(cat "$pidfile")" || true
    fi
  done
  for _ in $(seq 20); do pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || break; sleep 0.5; done
fi
if ! pgrep -x slurmctld >/dev/null; then
  log "starting slurmctld"
  # -i: ignore state files left by an earlier run whose config differed.
  slurmctld -i || die "slurmctld failed to start; last log lines:
$(tail -n 20 "$STATE/log/slurmctld.log" 2>/dev/null)"
fi
for _ in $(seq 30); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.5; done
scontrol ping 2>/dev/null | grep -q UP || die "slurmctld is not answering (scontrol ping); last log lines:
$(tail -n 20 "$STATE/log/slurmctld.log" 2>/dev/null)"
if ! pgrep -x slurmd >/dev/null; then
  log "starting slurmd"
  slurmd -N localhost || die "slurmd failed to start; last log lines:
$(tail -n 20 "$STATE/log/slurmd.log" 2>/dev/null)"
fi

# 5. Wait for the node ------------------------------------------------------------------------
deadline=$((SECONDS + WAIT))
state=""
while ((SECONDS < deadline)); do
  state=$(sinfo -h -N -n localhost -o '%T' 2>/dev/null | head -n1 || true)
  case $state in
    idle|mixed|allocated) break ;;
    down*|drain*|fail*) scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true ;;
  esac
  sleep 1
done
case $state in
  idle|mixed|allocated) ;;
  *) die "node localhost is not idle after ${WAIT}s (state: '${state:-none}'); reason: $(sinfo -h -N -o '%E' 2>/dev/null)
slurmd log tail:
$(tail -n 20 "$STATE/log/slurmd.log" 2>/dev/null)" ;;
esac
log "SLURM is up: $(sinfo -h -o '%P %a %D %T %c CPUs %m MB')"
