#!/usr/bin/env bash
# A real single-node Slurm cluster on localhost, for the `slurm` tests and for trying the
# cluster path (`specbench cluster ...`) without a cluster.
#
#   scripts/slurm_local.sh start    install Debian's Slurm + munge + MariaDB (idempotent), start
#                                   munged, mariadbd, slurmdbd, slurmctld, slurmd; wait for an idle node
#   scripts/slurm_local.sh status   the daemons (by recorded PID) and sinfo
#   scripts/slurm_local.sh stop     cancel every job, stop every daemon this script started (by PID)
#   scripts/slurm_local.sh env      print `export SLURM_CONF=...` (use: eval "$(scripts/slurm_local.sh env)")
#
# Everything lives under $SPECBENCH_SLURM_DIR (default /tmp/specbench-slurm): a private
# slurm.conf (clients find it through SLURM_CONF; nothing is written to /etc/slurm), a private
# munge key and socket, a private MariaDB on 127.0.0.1 for slurmdbd (so `sacct` works: without
# accounting a job killed from outside leaves submitit waiting forever), state, logs and PIDs.
# Two fake GPUs are declared as gres (character devices made with mknod c 195 N: Slurm refuses
# regular files), so GPU requests are really scheduled and CUDA_VISIBLE_DEVICES is set per task.
# Partitions: `gpu` (default) and `cpu`, both on the one node `localhost`.
# No systemd here: the daemons run in the foreground of their own sessions, their PIDs recorded.
set -euo pipefail

DIR=${SPECBENCH_SLURM_DIR:-/tmp/specbench-slurm}
# Ports away from the standard 6817-6819 and 3306, so a system Slurm or MySQL is not disturbed.
CTLD_PORT=${SPECBENCH_SLURM_PORT:-16817}
SLURMD_PORT=$((CTLD_PORT + 1))
DBD_PORT=$((CTLD_PORT + 2))
DB_PORT=$((CTLD_PORT + 3))
CLUSTER=specbench
MUNGE_RUN=/run/munge   # the socket every munge client looks for
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)   # start order; stopped in reverse
PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)

log() { echo "[slurm_local] $*" >&2; }
die() { log "error: $*"; exit 1; }

pid_of() { cat "$DIR/pids/$1.pid" 2>/dev/null || true; }
# Alive and still the program we started (a recycled PID is not ours to signal).
alive() {
  local pid; pid=$(pid_of "$1")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$1"
}

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  log "installing ${missing[*]} (apt-get)"
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  # policy-rc.d-less containers try to start the services at install: harmless, we start our own.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >"${TMPDIR:-/tmp}/specbench-slurm-apt.log" 2>&1 \
    || { tail -20 "${TMPDIR:-/tmp}/specbench-slurm-apt.log" >&2; die "apt-get install failed"; }
}

# Start "$@" in its own session, in the foreground (so $! is the daemon), and record its PID.
# Inherited descriptors above 2 are closed first: a daemon must not keep open what its caller
# holds (the quiet-machine lock of `flock -s LOCK scripts/slurm_local.sh start`, a pipe).
launch() {
  local name=$1; shift
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec setsid "$@"
  ) </dev/null >>"$DIR/log/$name.out" 2>&1 &
  echo $! >"$DIR/pids/$name.pid"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2; shift 2
  local end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || die "$what not ready after ${limit}s (logs: $DIR/log)"
    sleep 0.2
  done
}

write_config() {
  mkdir -p "$DIR"/{pids,log,state/ctld,state/d,munge,db,dev}
  chmod 700 "$DIR/munge"
  # Two fake GPUs: character devices with NVIDIA's major number.
  for i in 0 1; do [ -c "$DIR/dev/nvidia$i" ] || mknod "$DIR/dev/nvidia$i" c 195 $i; done
  # The node as slurmd sees it (CPUs, sockets, cores, memory), renamed to localhost.
  local node; node=$(slurmd -C | head -1 | sed -E 's/^NodeName=[^ ]+ //')
  cat >"$DIR/slurm.conf" <<EOF
# Written by scripts/slurm_local.sh: a private single-node cluster on 127.0.0.1.
ClusterName=$CLUSTER
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state/ctld
SlurmdSpoolDir=$DIR/state/d
SlurmctldPidFile=$DIR/state/slurmctld.pid
SlurmdPidFile=$DIR/state/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
# No cgroups and no systemd in a container: track processes by parentage, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=512
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
# Schedule at once and keep finished jobs visible to squeue/scontrol for a while.
SchedulerParameters=sched_interval=2,bf_interval=2
MinJobAge=600
KillWait=5
NodeName=localhost NodeAddr=127.0.0.1 $node Gres=gpu:2 State=UNKNOWN
PartitionName=gpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP
PartitionName=cpu Nodes=localhost MaxTime=INFINITE State=UP
EOF
  cat >"$DIR/gres.conf" <<EOF
AutoDetect=off
NodeName=localhost Name=gpu File=$DIR/dev/nvidia[0-1]
EOF
  # slurmdbd reads slurmdbd.conf beside SLURM_CONF and refuses one others can read.
  cat >"$DIR/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/state/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=root
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$DIR/slurmdbd.conf"
}

start() {
  install_packages
  if alive slurmctld && alive slurmd; then log "already running ($DIR)"; print_env; return; fi
  # Whatever a previous, interrupted start left behind is stopped and wiped: start from nothing.
  stop_daemons
  rm -rf "$DIR"
  local t0=$SECONDS
  write_config
  export SLURM_CONF=$DIR/slurm.conf

  # munge on its default socket: Slurm's clients (sacctmgr's connection to slurmdbd among them)
  # do not all honour AuthInfo=socket=..., so a private socket path is not an option. A munged
  # already serving that socket (a system one) is used as it is; otherwise ours, with our key.
  if ! munge -n </dev/null >/dev/null 2>&1; then
    mkdir -p "$MUNGE_RUN"
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$DIR/munge/munge.key"
    launch munged munged --foreground --force --key-file="$DIR/munge/munge.key" \
      --socket="$MUNGE_RUN/munge.socket.2" --pid-file="$DIR/munge/munged.pid" \
      --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
    wait_for 20 munged munge -n
  fi

  # A throwaway MariaDB for accounting only: bound to 127.0.0.1, no grant tables (no users to
  # set up), its data under $DIR.
  mariadb-install-db --no-defaults --user=root --datadir="$DIR/db" --auth-root-authentication-method=normal \
    --skip-test-db >"$DIR/log/mariadb-install.log" 2>&1 || { tail "$DIR/log/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
  launch mariadbd mariadbd --no-defaults --user=root --datadir="$DIR/db" --bind-address=127.0.0.1 \
    --port="$DB_PORT" --socket="$DIR/db/mysql.sock" --pid-file="$DIR/db/mariadbd.pid" \
    --skip-grant-tables --log-error="$DIR/log/mariadbd.log" --innodb-buffer-pool-size=64M

  wait_for 30 mariadbd mariadb-admin --no-defaults --protocol=tcp -h 127.0.0.1 -P "$DB_PORT" -u root ping
  launch slurmdbd slurmdbd -D
  wait_for 30 slurmdbd sacctmgr -n list cluster
  sacctmgr -i -Q add cluster "$CLUSTER" >/dev/null 2>&1 || true
  launch slurmctld slurmctld -D -i
  launch slurmd slurmd -D -N localhost
  wait_for 40 "an idle node" bash -c "sinfo -h -N -o %t -p gpu | grep -qx idle"
  log "cluster up in $((SECONDS - t0)) s: $(sinfo -h -o '%P %D %t %G' | tr '\n' ';')"
  print_env
}

print_env() { echo "export SLURM_CONF=$DIR/slurm.conf"; }

stop_daemons() {
  [ -d "$DIR/pids" ] || return 0
  if alive slurmctld; then
    # Cancel every job of this private cluster first, so no job step outlives slurmd.
    SLURM_CONF=$DIR/slurm.conf scancel --full --user="$(id -un)" >/dev/null 2>&1 || true
    local end=$((SECONDS + 15))
    while [ $SECONDS -lt $end ] && [ -n "$(SLURM_CONF=$DIR/slurm.conf squeue -h -t R,CG -o %i 2>/dev/null)" ]; do sleep 0.5; done
  fi
  for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
    local name=${DAEMONS[$i]} pid
    pid=$(pid_of "$name")
    if alive "$name"; then
      kill -TERM "$pid" 2>/dev/null || true
      local end=$((SECONDS + 20))
      while alive "$name" && [ $SECONDS -lt $end ]; do sleep 0.2; done
      if alive "$name"; then log "$name ($pid) ignored TERM: KILL"; kill -KILL "$pid" 2>/dev/null || true; fi
      log "stopped $name ($pid)"
    fi
    rm -f "$DIR/pids/$name.pid"
  done
}

status() {
  local rc=0
  for name in "${DAEMONS[@]}"; do
    if [ "$name" = munged ] && [ ! -f "$DIR/pids/munged.pid" ] && munge -n </dev/null >/dev/null 2>&1; then
      echo "munged running (not started by this script)"
    elif alive "$name"; then echo "$name running (pid $(pid_of "$name"))"; else echo "$name stopped"; rc=3; fi
  done
  if [ $rc = 0 ]; then SLURM_CONF=$DIR/slurm.conf sinfo; fi
  return $rc
}

case "${1:-}" in
  start) start ;;
  stop) stop_daemons ;;
  status) status ;;
  env) print_env ;;
  *) echo "usage: $0 start|stop|status|env   (state in \$SPECBENCH_SLURM_DIR, default /tmp/specbench-slurm)" >&2; exit 2 ;;
esac
