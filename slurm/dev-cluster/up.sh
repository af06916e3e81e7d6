#!/usr/bin/env bash
# up.sh — bring up a real single-node SLURM cluster on this machine (`make slurm-up`).
#
#   munged + MariaDB (private instance) + slurmdbd + slurmctld + slurmd, all on localhost.
#   Installs the Debian packages if missing, writes the configs, starts only what is not
#   already running, and waits until the node is idle and a real batch job has completed.
#   Idempotent: running it again when the cluster is up is a cheap no-op (about 1 s).
#   Stop with down.sh (`make slurm-down`; it stops only the daemons recorded in $SLURM_CI_ROOT/run).
#   Then: make replicate-grpo SCALE=smoke CLUSTER=slurm PROFILE=local
#
# Needs: Debian/Ubuntu with slurm 22.05+ packages, root (run with sudo on a laptop), apt
# reachable (only when packages are missing). It writes /etc/slurm/slurm.conf: do not run it
# on a machine that is already part of a real cluster.
#
# Exit status: 0 up; 1 failed (logs tailed); 3 cannot run here (not root, no apt, packages
# unavailable): the message starts with "SKIP:" so tests can skip with that reason.
#
# Knobs (environment):
#   SLURM_CI_ROOT     state/log/pid/db dir                   (default /tmp/slurm-ci)
#   SLURM_CI_DBD      1 = slurmdbd+MariaDB so `sacct` works   (default 1; 0 = no accounting)
#   SLURM_CI_CPUS     CPUs advertised for the node           (default: nproc; may exceed it)
#   SLURM_CI_MEM_MB   RealMemory advertised (MB)             (default: 90% of MemTotal)
#   SLURM_CI_GPUS     number of fake GPUs (gres gpu)         (default 0 = no GRES; N: N fake /dev/null clones)
#   SLURM_CI_PARTITION partition name                        (default debug)
#   SLURM_CI_DB_PORT  TCP port of the private MariaDB        (default 3307, 127.0.0.1 only)
#   SLURM_CI_FRESH    1 = wipe $SLURM_CI_ROOT (job state+DB) before starting (cluster must be down)
set -euo pipefail

ROOT=${SLURM_CI_ROOT:-/tmp/slurm-ci}
DBD=${SLURM_CI_DBD:-1}
CPUS=${SLURM_CI_CPUS:-$(nproc)}
MEM_MB=${SLURM_CI_MEM_MB:-$(awk '/MemTotal/ {printf "%d", $2/1024*0.9}' /proc/meminfo)}
GPUS=${SLURM_CI_GPUS:-0}
PART=${SLURM_CI_PARTITION:-debug}
DB_PORT=${SLURM_CI_DB_PORT:-3307}
NODE=$(hostname -s)
ETC=/etc/slurm           # default location: every sbatch/squeue/sacct finds it without SLURM_CONF
RUN=$ROOT/run LOG=$ROOT/log

log() { echo "[slurm-up $(date +%T)] $*" >&2; }
skip() { log "SKIP: $*"; exit 3; }
die() {
  log "ERROR: $*"
  for f in "$LOG"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
  exit 1
}
# alive NAME PIDFILE: true if PIDFILE names a live process whose comm is NAME
alive() {
  local p
  p=$(cat "$2" 2>/dev/null) || return 1
  [ -n "$p" ] && [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$1" ] \
    && [ "$(awk '{print $3}' /proc/"$p"/stat 2>/dev/null)" != Z ]   # a zombie is not alive
}
wait_for() { # wait_for SECONDS DESCRIPTION CMD...
  local t=$1 what=$2; shift 2; local end=$((SECONDS + t))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || die "timed out after ${t}s waiting for $what"
    sleep 0.2
  done
}
T0=$EPOCHREALTIME

[ "$(id -u)" = 0 ] \
  || skip "the dev cluster must be started as root (it writes /etc/slurm and runs the daemons): sudo bash $0"

# ---------------------------------------------------------------- 1. packages
pkgs=(slurmctld slurmd slurm-client munge); cmds=(slurmctld slurmd sbatch munged)
[ "$DBD" = 1 ] && { pkgs+=(slurmdbd mariadb-server); cmds+=(slurmdbd mariadbd); }
missing=0; for c in "${cmds[@]}"; do command -v "$c" >/dev/null || [ -x /usr/sbin/"$c" ] || missing=1; done
if [ $missing = 1 ]; then
  command -v apt-get >/dev/null || skip "SLURM is not installed and there is no apt-get to install ${pkgs[*]}"
  log "installing ${pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null \
         && apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null; } \
    || skip "apt-get could not install ${pkgs[*]} (offline, or not Debian/Ubuntu?)"
fi
export PATH=/usr/sbin:/usr/bin:$PATH

# ---------------------------------------------------------------- 2. dirs + configs
if [ "${SLURM_CI_FRESH:-0}" = 1 ]; then
  for n in slurmd slurmctld slurmdbd mariadbd munged; do
    alive $n "$RUN/$n.pid" && die "SLURM_CI_FRESH=1 but $n is running; run down.sh first"
  done
  rm -rf "$ROOT"
fi
mkdir -p "$RUN" "$LOG" "$ROOT/state" "$ROOT/spool" "$ETC"

gres_line="" gres_types=""
if [ "$GPUS" -gt 0 ]; then
  # Fake GPUs: slurmd insists File= is a char/block device; clones of /dev/null (1,3) work.
  # Naming them nvidiaN makes slurm export CUDA_VISIBLE_DEVICES to jobs.
  mkdir -p "$ROOT/dev"
  for ((i = 0; i < GPUS; i++)); do
    [ -c "$ROOT/dev/nvidia$i" ] || mknod "$ROOT/dev/nvidia$i" c 1 3 2>/dev/null \
      || { log "mknod failed; starting without fake GPUs"; GPUS=0; break; }
  done
fi
if [ "$GPUS" -gt 0 ]; then
  gres_types="GresTypes=gpu"; gres_line=" Gres=gpu:$GPUS"
  echo "NodeName=$NODE Name=gpu File=$ROOT/dev/nvidia[0-$((GPUS - 1))]" > "$ETC/gres.conf"
else
  rm -f "$ETC/gres.conf"
fi

if [ "$DBD" = 1 ]; then
  acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
JobAcctGatherType=jobacct_gather/linux"
else
  acct="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
fi

cat > "$ETC/slurm.conf.new" <<EOF
# generated by slurm/dev-cluster/up.sh — single-node dev/test cluster
ClusterName=ci
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# credential lifetime; also how long a requeued job waits before it may restart (default 120 s)
AuthInfo=cred_expire=10
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
SchedulerType=sched/backfill
# schedule batch jobs right away instead of on the next ~1-3 s tick (submit->running 1.7 s -> 0.7 s)
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
ReturnToService=2
SlurmdParameters=config_overrides
MailProg=/bin/true
StateSaveLocation=$ROOT/state
SlurmdSpoolDir=$ROOT/spool
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
$acct
JobCompType=jobcomp/none
MinJobAge=300
KillWait=5
InactiveLimit=0
$gres_types
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB$gres_line State=UNKNOWN
PartitionName=$PART Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
if ! cmp -s "$ETC/slurm.conf.new" "$ETC/slurm.conf" && alive slurmctld "$RUN/slurmctld.pid"; then
  log "WARNING: slurm.conf changed while the cluster runs; run down.sh then up.sh to apply it"
fi
mv "$ETC/slurm.conf.new" "$ETC/slurm.conf"

if [ "$DBD" = 1 ]; then
  cat > "$ETC/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
DebugLevel=info
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm-ci
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$ETC/slurmdbd.conf"   # slurmdbd refuses a world-readable config
fi

# ---------------------------------------------------------------- 3. munge
if alive munged "$RUN/munged.pid"; then
  :   # ours, already running
elif munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  log "a munged not started by this script is answering; reusing it (down.sh will leave it alone)"
else
  [ -s /etc/munge/munge.key ] || {
    mungekey -c -k /etc/munge/munge.key && chown munge:munge /etc/munge/munge.key \
      && chmod 400 /etc/munge/munge.key
  }
  # /run is tmpfs: gone after reboot, and no systemd here
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
  runuser -u munge -- /usr/sbin/munged || die "munged failed (see /var/log/munge/munged.log)"
  wait_for 10 munged bash -c 'munge -n | unmunge'
  cp /run/munge/munged.pid "$RUN/munged.pid"   # recorded here = started by us = down.sh may stop it
fi

# ---------------------------------------------------------------- 4. MariaDB + slurmdbd
if [ "$DBD" = 1 ]; then
  DB=$ROOT/db
  if ! alive mariadbd "$RUN/mariadbd.pid"; then
    if [ ! -d "$DB/data/mysql" ]; then
      mkdir -p "$DB/data"
      mariadb-install-db --no-defaults --user=root --datadir="$DB/data" \
        --auth-root-authentication-method=socket \
        --skip-test-db > "$LOG/mariadb-install.log" 2>&1 || die "mariadb-install-db failed"
    fi
    setsid /usr/sbin/mariadbd --no-defaults --user=root --datadir="$DB/data" --socket="$DB/mysqld.sock" \
      --port="$DB_PORT" --bind-address=127.0.0.1 --pid-file="$RUN/mariadbd.pid" \
      --log-error="$LOG/mariadb.log" \
      --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900 --skip-log-bin </dev/null >/dev/null 2>&1 &
    wait_for 60 mariadb mariadb-admin --no-defaults --socket="$DB/mysqld.sock" ping
    mariadb --no-defaults --socket="$DB/mysqld.sock" -uroot -e "
      CREATE DATABASE IF NOT EXISTS slurm_acct_db;
      CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm-ci';
      CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm-ci';
      GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
      GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "creating the slurm DB user failed"
  fi
  if ! alive slurmdbd "$RUN/slurmdbd.pid"; then
    slurmdbd || die "slurmdbd failed to start"
  fi
  wait_for 60 slurmdbd sacctmgr -n list cluster
fi

# ---------------------------------------------------------------- 5. slurmctld + slurmd
alive slurmctld "$RUN/slurmctld.pid" || slurmctld || die "slurmctld failed to start"
wait_for 30 slurmctld scontrol ping
alive slurmd "$RUN/slurmd.pid" || slurmd || die "slurmd failed to start"

state() { sinfo -h -n "$NODE" -o %t 2>/dev/null; }
end=$((SECONDS + 60))
until [ "$(state)" = idle ] || [ "$(state)" = mix ] || [ "$(state)" = alloc ]; do
  case "$(state)" in
    drain* | down* | drng*) scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true ;;
  esac
  [ $SECONDS -lt $end ] || die "node $NODE not idle after 60s (state: $(state))"
  sleep 0.2
done

# ---------------------------------------------------------------- 6. smoke test: one real batch job
# (also waits out slurmctld's first scheduling pass, ~3 s after it starts; batch jobs submitted
#  before that just sit in PD, so the first test job would otherwise pay it)
jid=$(sbatch --parsable -p "$PART" -N1 -n1 -t 1 --mem=100M -o /dev/null -J smoke --wrap true) \
  || die "sbatch failed"
end=$((SECONDS + 60))   # (poll ourselves: `sbatch --wait` polls every 2-10 s)
while :; do
  js=$(scontrol -o show job "$jid" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
  case "$js" in
    COMPLETED) break ;;
    PENDING | CONFIGURING | RUNNING | COMPLETING | "") ;;
    *) die "smoke job $jid ended $js" ;;
  esac
  [ $SECONDS -lt $end ] || die "smoke job $jid still $js after 60s"
  sleep 0.1
done
[ "$DBD" = 1 ] && { sacct -n -X -j "$jid" >/dev/null || die "sacct not answering"; }

log "cluster up in $(awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME - $T0}")s: node $NODE cpus=$CPUS" \
  "mem=${MEM_MB}M gpus=$GPUS partition=$PART accounting=$([ "$DBD" = 1 ] && echo slurmdbd || echo none)"
sinfo
