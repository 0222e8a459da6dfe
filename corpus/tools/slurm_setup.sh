#!/usr/bin/env bash
# slurm_setup.sh -- (re)configure and start a real single-node SLURM as root.
#
# What it does (idempotent, non-interactive, safe to re-run):
#   1. apt-get install -y slurm-wlm munge        (only if slurmctld/munged are missing)
#   2. creates a munge key if there is none and (re)starts munged as user munge
#   3. writes /etc/slurm/slurm.conf and /etc/slurm/cgroup.conf:
#        - one node "node01" (NodeAddr 127.0.0.1) with the machine's real memory,
#          SlurmdParameters=config_overrides and a CPU count of $LOGSLEUTH_CPUS
#          (default 16) so that 4- and 8-task jobs fit on a 2-core machine
#        - ProctrackType=proctrack/cgroup, TaskPlugin=task/cgroup,
#          ConstrainRAMSpace=yes (so --mem gives real cgroup OOM kills)
#        - partition "debug" (default), short KillWait/MinJobAge so tests run fast
#        - Epilog=$LOGSLEUTH_EPILOG when that variable is set (path to a script)
#   4. adds "127.0.1.1 node01" to /etc/hosts if no line names node01
#   5. stops any slurmctld/slurmd started earlier (by their pid files), then starts
#      both as root inside a UTS namespace whose hostname is "node01", so that the
#      jobs' processes (and e.g. socket.getfqdn() in torchrun's error tables) see
#      node01 and not the build machine's name
#   6. waits (timeout $LOGSLEUTH_SLURM_TIMEOUT, default 60 s) until `sinfo` shows
#      node01 idle; exits non-zero with the daemon logs' tail otherwise.
#
# Usage:
#   sudo bash corpus/tools/slurm_setup.sh
#   LOGSLEUTH_EPILOG=/path/epilog.sh bash corpus/tools/slurm_setup.sh
#   bash corpus/tools/slurm_setup.sh --stop      # stop slurmctld/slurmd (munged stays)
#
# Environment knobs: LOGSLEUTH_EPILOG, LOGSLEUTH_CPUS (16), LOGSLEUTH_SLURM_TIMEOUT (60),
# LOGSLEUTH_MINJOBAGE (30), LOGSLEUTH_KILLWAIT (5).
set -euo pipefail

[ "$(id -u)" = 0 ] || { echo "slurm_setup.sh: must run as root" >&2; exit 1; }

CONF_DIR=/etc/slurm
NODE=node01
CPUS=${LOGSLEUTH_CPUS:-16}
TIMEOUT=${LOGSLEUTH_SLURM_TIMEOUT:-60}
MINJOBAGE=${LOGSLEUTH_MINJOBAGE:-30}
KILLWAIT=${LOGSLEUTH_KILLWAIT:-5}
EPILOG=${LOGSLEUTH_EPILOG:-}
LOGDIR=/var/log/slurm

log() { echo "slurm_setup: $*"; }

stop_daemons() {
    local name pidf pid
    for name in slurmd slurmctld; do
        pidf=/run/$name.pid
        if [ -s "$pidf" ]; then
            pid=$(cat "$pidf")
            if kill -0 "$pid" 2>/dev/null; then
                log "stopping $name (pid $pid)"
                kill "$pid" 2>/dev/null || true
                for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
                kill -9 "$pid" 2>/dev/null || true
            fi
            rm -f "$pidf"
        fi
    done
}

if [ "${1:-}" = "--stop" ]; then
    stop_daemons
    exit 0
fi

# 1. packages
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
   || ! command -v sbatch >/dev/null; then
    log "installing slurm-wlm munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q slurm-wlm munge
fi
# the Debian package may start daemons through systemd when it exists; we run our own
if [ -d /run/systemd/system ]; then
    systemctl stop slurmd slurmctld >/dev/null 2>&1 || true
fi

# 2. munge
mkdir -p /etc/munge /var/log/munge /var/lib/munge /run/munge
if [ ! -s /etc/munge/munge.key ]; then
    log "creating munge key"
    if command -v mungekey >/dev/null; then
        mungekey --create --keyfile=/etc/munge/munge.key --force
    else
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
fi
chown -R munge:munge /etc/munge /var/log/munge /var/lib/munge /run/munge
chmod 0700 /etc/munge /var/log/munge /var/lib/munge
chmod 0755 /run/munge
chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "starting munged"
    if [ -s /run/munge/munged.pid ]; then kill "$(cat /run/munge/munged.pid)" 2>/dev/null || true; sleep 0.5; fi
    rm -f /run/munge/munge.socket.2 /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 1 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.2; done
    munge -n | unmunge >/dev/null || { echo "slurm_setup: munged does not work" >&2; exit 1; }
fi

# 3. configuration
CTLD_HOST=$NODE
UTS_OK=1
if ! unshare --uts -- true 2>/dev/null; then
    UTS_OK=0
    CTLD_HOST=$(hostname -s)   # slurmctld insists on running on the host it is configured for
fi
mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
real_mem=$(( mem_kb / 1024 * 9 / 10 ))   # MB, leave 10% to the OS
mkdir -p "$CONF_DIR" /var/spool/slurmctld /var/spool/slurmd "$LOGDIR"
epilog_line="#Epilog= (set LOGSLEUTH_EPILOG to enable)"
if [ -n "$EPILOG" ]; then
    [ -e "$EPILOG" ] || log "warning: LOGSLEUTH_EPILOG=$EPILOG does not exist (yet)"
    epilog_line="Epilog=$EPILOG"
fi
cat > "$CONF_DIR/slurm.conf.new" <<EOF
# written by logsleuth corpus/tools/slurm_setup.sh -- single-node test cluster
ClusterName=logsleuth
SlurmctldHost=$CTLD_HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmdParameters=config_overrides
DefMemPerCPU=1024
ReturnToService=2
KillWait=$KILLWAIT
MinJobAge=$MINJOBAGE
InactiveLimit=0
Waittime=0
OverTimeLimit=0
UnkillableStepTimeout=60
SlurmctldTimeout=30
SlurmdTimeout=60
$epilog_line
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$CPUS RealMemory=$real_mem State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
mv "$CONF_DIR/slurm.conf.new" "$CONF_DIR/slurm.conf"
cat > "$CONF_DIR/cgroup.conf" <<EOF
# written by logsleuth corpus/tools/slurm_setup.sh
CgroupAutomount=yes
ConstrainCores=no
ConstrainDevices=no
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
EOF

# 4. the node name must resolve
if ! grep -Eq "^[^#]*[[:space:]]$NODE([[:space:]]|\$)" /etc/hosts; then
    log "adding $NODE to /etc/hosts"
    echo "127.0.1.1 $NODE" >> /etc/hosts
fi

# 5. (re)start the daemons inside a UTS namespace named node01
stop_daemons
log "starting slurmctld and slurmd (hostname $NODE in a UTS namespace)"
if [ "$UTS_OK" = 1 ]; then
    unshare --uts -- /bin/sh -c "hostname $NODE && /usr/sbin/slurmctld -i && /usr/sbin/slurmd -N $NODE" \
        || { echo "slurm_setup: failed to start the daemons" >&2; tail -20 "$LOGDIR/slurmctld.log" "$LOGDIR/slurmd.log" >&2 || true; exit 1; }
else
    # no UTS namespaces here (e.g. an unprivileged container): the node is still called
    # node01 for SLURM, but the jobs will see the machine's own host name
    log "warning: unshare --uts not possible; starting the daemons without a node01 host name"
    { /usr/sbin/slurmctld -i && /usr/sbin/slurmd -N "$NODE"; } \
        || { echo "slurm_setup: failed to start the daemons" >&2; tail -20 "$LOGDIR/slurmctld.log" "$LOGDIR/slurmd.log" >&2 || true; exit 1; }
fi

# 6. wait for the node to be idle
deadline=$(( $(date +%s) + TIMEOUT ))
state=""
while [ "$(date +%s)" -lt "$deadline" ]; do
    state=$(sinfo -h -n "$NODE" -o '%T' 2>/dev/null | head -1 || true)
    case "$state" in
        idle) log "node $NODE is idle; SLURM ready"; sinfo; exit 0 ;;
        drain*|down*)
            scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 1
done
echo "slurm_setup: ERROR: node $NODE not idle after ${TIMEOUT}s (state: '${state:-no answer}')" >&2
sinfo -R >&2 || true
tail -20 "$LOGDIR/slurmctld.log" "$LOGDIR/slurmd.log" >&2 || true
exit 1
