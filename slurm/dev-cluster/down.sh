#!/usr/bin/env bash
# down.sh — stop the single-node dev cluster started by up.sh (`make slurm-down`).
# Cancels all jobs, then stops only the daemons whose pid files up.sh left in
# $SLURM_CI_ROOT/run (checking each PID's name), in reverse start order. Keeps state + DB
# (job ids keep increasing across restarts); SLURM_CI_FRESH=1 on the next start wipes them.
set -uo pipefail
ROOT=${SLURM_CI_ROOT:-/tmp/slurm-ci}
RUN=$ROOT/run
export PATH=/usr/sbin:/usr/bin:$PATH
log() { echo "[slurm-down $(date +%T)] $*" >&2; }

running() { # running PID: alive and not a zombie (a daemon's parent here may reap late)
  local st; st=$(awk '{print $3}' /proc/"$1"/stat 2>/dev/null) && [ -n "$st" ] && [ "$st" != Z ]; }

pid_of() { # pid_of NAME: PID from $RUN/NAME.pid if that process is alive and is NAME
  local p; p=$(cat "$RUN/$1.pid" 2>/dev/null) || return 1
  [ -n "$p" ] && [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$1" ] && running "$p" && echo "$p"; }

stop() { # stop NAME [TIMEOUT_S]
  local n=$1 t=${2:-20} p
  if p=$(pid_of "$n"); then
    kill -TERM "$p" 2>/dev/null
    for ((i = 0; i < t * 10; i++)); do running "$p" || break; sleep 0.1; done
    if running "$p"; then log "$n ($p) ignored SIGTERM for ${t}s; SIGKILL"; kill -KILL "$p" 2>/dev/null; fi
    log "stopped $n ($p)"
  fi
  rm -f "$RUN/$n.pid"
}

# 1. jobs: slurmstepd and job processes outlive slurmd, so cancel them while slurmctld is up
if pid_of slurmctld >/dev/null && scontrol ping >/dev/null 2>&1; then
  if [ -n "$(squeue -h -o %i 2>/dev/null)" ]; then
    log "cancelling all jobs"; scancel $(squeue -h -o %A | sort -u) 2>/dev/null
    for ((i = 0; i < 300; i++)); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
  fi
fi
# a cancelled job's slurmstepd lingers up to KillWait (5 s) after squeue forgets it: wait (never kill)
for ((i = 0; i < 150; i++)); do [ -z "$(ps -C slurmstepd -o pid= 2>/dev/null)" ] && break; sleep 0.1; done
# 2. daemons, reverse start order
stop slurmd; stop slurmctld; stop slurmdbd; stop mariadbd 60; stop munged
# 3. report (never kill) any job step daemons that survived
left=$(ps -C slurmstepd -o pid= 2>/dev/null | tr -s ' \n' ' ')
[ -n "${left// /}" ] && log "WARNING: slurmstepd still running: $left"
exit 0
