#!/bin/bash
# logsleuth SLURM epilog: when a job fails, write why next to its output.
#
# Wire it in slurm.conf on every node (see docs/slurm.md):
#     Epilog=/etc/slurm/epilog.d/*          # with this file copied in there, or
#     Epilog=/opt/logsleuth/epilog.sh       # on its own
# and say where logsleuth is in /etc/logsleuth/epilog.conf (see epilog.conf).
#
# For a failed job it writes <output>.logsleuth.json and <output>.logsleuth.md
# next to the job's output (slurm-123.out -> slurm-123.logsleuth.{json,md}),
# owned by the job's user, or into LOGSLEUTH_REPORT_DIR/<user>/.
#
# It ALWAYS exits 0, within LOGSLEUTH_TIMEOUT seconds: a failing or slow epilog
# drains the node. It calls no SLURM command (the SLURM docs forbid it here).
# It reads the job's files only as the job's user, never as root.
# Works as Epilog (slurmd, every node: only the batch host acts) and as
# EpilogSlurmctld (controller, once per job; needs the job's files visible there).

# Settings: these defaults, or the same names in the environment, or the config file (which wins).
: "${LOGSLEUTH_CMD=logsleuth}"            # how to run logsleuth, e.g. "/opt/logsleuth/venv/bin/logsleuth"
: "${LOGSLEUTH_PYTHONPATH=}"              # for a source checkout run as "python -m logsleuth"
: "${LOGSLEUTH_REPORT_DIR=}"              # empty: next to the job's output; else DIR/<user>/slurm-<job>.logsleuth.*
: "${LOGSLEUTH_STORE=}"                   # a history folder to append every verdict to (logsleuth history DIR)
: "${LOGSLEUTH_WHEN=failed}"              # failed | always
: "${LOGSLEUTH_BUDGET=10}"                # seconds of log reading
: "${LOGSLEUTH_TIMEOUT=30}"               # hard limit for the whole epilog; keep it below EpilogTimeout
: "${LOGSLEUTH_THREADS=2}"                # CPU threads for the analysis
: "${LOGSLEUTH_LOG=/var/log/logsleuth-epilog.log}"   # one line per job; "" for none
: "${LOGSLEUTH_SLOTS=}"                   # analyses at once on this node; empty: one per CPU core
: "${LOGSLEUTH_QUEUE_WAIT=120}"           # seconds a job may wait for a slot before it is skipped
: "${LOGSLEUTH_LOCK_DIR=/run/logsleuth}"  # root-only folder for the slot locks

# slurmd gives its scripts no PATH
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
conf="${LOGSLEUTH_EPILOG_CONF:-/etc/logsleuth/epilog.conf}"
# it runs as root: read it only if root (whoever runs this) owns it and no one else may write it
if [ -n "$(find "$conf" -maxdepth 0 -user "$(id -u)" ! -perm /022 2>/dev/null)" ]; then
    # shellcheck disable=SC1090
    . "$conf" 2>/dev/null
fi

if [ -z "${_LOGSLEUTH_GUARDED:-}" ]; then
    # The outer run: redirect, bound the time, and exit 0 whatever happens inside.
    exec </dev/null
    if [ -z "$LOGSLEUTH_LOG" ] || ! { : >>"$LOGSLEUTH_LOG"; } 2>/dev/null; then
        LOGSLEUTH_LOG=/dev/null
    fi
    # Many jobs ending at once on a node would all start an analysis together and all miss
    # their time limit. Each waits for one of LOGSLEUTH_SLOTS slots (flock on root-only lock
    # files), then gets its whole LOGSLEUTH_TIMEOUT: the node stays busy for the queue's
    # length, and every job gets its report.
    slot_fd=
    if install -d -m 0700 "$LOGSLEUTH_LOCK_DIR" 2>/dev/null \
        && [ -n "$(find "$LOGSLEUTH_LOCK_DIR" -maxdepth 0 -type d -user "$(id -u)" ! -perm /077 2>/dev/null)" ]; then
        slots=${LOGSLEUTH_SLOTS:-$(nproc 2>/dev/null || echo 1)}
        case "$slots" in ''|*[!0-9]*|0) slots=1 ;; esac
        waited_until=$((SECONDS + LOGSLEUTH_QUEUE_WAIT))
        while [ -z "$slot_fd" ]; do
            for ((k = 0; k < slots; k++)); do
                exec {fd}>>"$LOGSLEUTH_LOCK_DIR/slot$k" || continue
                if flock -n "$fd"; then slot_fd=$fd; break; fi
                exec {fd}>&-
            done
            [ -n "$slot_fd" ] && break
            if [ "$SECONDS" -ge "$waited_until" ]; then
                echo "$(date +%FT%T) job ${SLURM_JOB_ID:-?}: skipped, no free slot after ${LOGSLEUTH_QUEUE_WAIT}s (raise LOGSLEUTH_SLOTS or LOGSLEUTH_QUEUE_WAIT)" >>"$LOGSLEUTH_LOG" 2>/dev/null
                exit 0
            fi
            sleep 0.$((RANDOM % 5 + 1))
        done
    fi
    _LOGSLEUTH_GUARDED=1 timeout -k 2 "${LOGSLEUTH_TIMEOUT}" /bin/bash "$0" "$@" >>"$LOGSLEUTH_LOG" 2>&1
    rc=$?
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "$(date +%FT%T) job ${SLURM_JOB_ID:-?}: stopped after ${LOGSLEUTH_TIMEOUT}s" >>"$LOGSLEUTH_LOG" 2>/dev/null
    exit 0
fi

# The inner run, under `timeout`. Nothing here may hang: no SLURM commands.
say() { echo "$(date +%FT%T) job ${SLURM_JOB_ID:-?}: $*"; }
stamp() { while IFS= read -r line; do echo "$(date +%FT%T) $line"; done; }

[ -n "${SLURM_JOB_ID:-}" ] || { say "no SLURM_JOB_ID: not run by SLURM"; exit 0; }
uid=${SLURM_JOB_UID:-}
gid=${SLURM_JOB_GID:-}
user=${SLURM_JOB_USER:-$uid}
case "$uid$gid" in *[!0-9]*|"") say "no numeric SLURM_JOB_UID/GID; skipped"; exit 0 ;; esac

args=(epilog --budget "$LOGSLEUTH_BUDGET")
[ "$LOGSLEUTH_WHEN" = always ] && args+=(--always)

# As root, touch only folders no user can change: a folder a user may write to lets them
# plant a link where root is about to create or chown something.
trusted_dir() {  # a real folder (not a link), owned by root, writable by root alone
    [ -d "$1" ] && [ ! -L "$1" ] && [ -n "$(find "$1" -maxdepth 0 -type d -user 0 ! -perm /022 2>/dev/null)" ]
}
if [ -n "$LOGSLEUTH_REPORT_DIR" ]; then
    case "$user" in *[!A-Za-z0-9._-]*|.|..|"") user=$uid ;; esac
    dir="$LOGSLEUTH_REPORT_DIR/$user"
    if [ "$(id -u)" = 0 ]; then
        [ -e "$LOGSLEUTH_REPORT_DIR" ] || [ -L "$LOGSLEUTH_REPORT_DIR" ] || install -d -m 0755 "$LOGSLEUTH_REPORT_DIR"
        trusted_dir "$LOGSLEUTH_REPORT_DIR" \
            || { say "refusing LOGSLEUTH_REPORT_DIR=$LOGSLEUTH_REPORT_DIR: it must be a folder owned by root that only root may write"; exit 0; }
        # mkdir never follows a link; an existing entry must be a real folder, made ours with chown -h
        mkdir -m 0700 "$dir" 2>/dev/null
        if [ -L "$dir" ] || [ ! -d "$dir" ] || ! chown -h "$uid:$gid" "$dir" || ! chmod 0700 "$dir"; then
            say "cannot create $dir (or it is a link)"; exit 0
        fi
    fi
    args+=(--report-dir "$dir")
fi
if [ -n "$LOGSLEUTH_STORE" ]; then
    # every job's user appends to it: writable by all, listable by none, files kept by their owner
    [ -e "$LOGSLEUTH_STORE" ] || [ -L "$LOGSLEUTH_STORE" ] || install -d -m 1733 "$LOGSLEUTH_STORE" || say "cannot create $LOGSLEUTH_STORE"
    args+=(--store "$LOGSLEUTH_STORE")
fi

# Run as the job's user, so the job's files are read with the job's rights and
# the reports belong to it. --init-groups needs the user in the passwd database.
as_user=()
if [ "$(id -u)" = 0 ] && [ "$uid" != 0 ]; then
    groups=--clear-groups
    setpriv --reuid="$uid" --regid="$gid" --init-groups true 2>/dev/null && groups=--init-groups
    as_user=(setpriv --reuid="$uid" --regid="$gid" "$groups" --)
fi

envs=(PYTHONNOUSERSITE=1 POLARS_MAX_THREADS="$LOGSLEUTH_THREADS")
[ -n "$LOGSLEUTH_PYTHONPATH" ] && envs+=(PYTHONPATH="$LOGSLEUTH_PYTHONPATH")
# shellcheck disable=SC2086  # LOGSLEUTH_CMD may be "python -m logsleuth"
(cd / && nice -n 10 "${as_user[@]}" env "${envs[@]}" $LOGSLEUTH_CMD "${args[@]}") 2>&1 | stamp
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || say "logsleuth exited with status $rc"
exit 0
