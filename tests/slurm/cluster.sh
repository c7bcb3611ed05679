#!/bin/bash
# cluster.sh - a single-node Slurm for the tests: munged, slurmctld, slurmd
# and slurmrestd, all under one folder, all on 127.0.0.1.
#
#   tests/slurm/cluster.sh start DIR   prints the path of DIR/env when the
#                                      node is idle and slurmrestd answers
#   tests/slurm/cluster.sh stop DIR    ends every daemon and job it started;
#                                      safe twice and after a failed start
#   tests/slurm/cluster.sh stop-rest DIR   stops slurmrestd alone (an outage:
#                                      slurmctld, slurmd and jobs go on)
#   tests/slurm/cluster.sh start-rest DIR  starts it again on the same port
#
# DIR/env (shell syntax, one NAME=value a line) holds SLURM_CONF,
# SLURMRESTD_URL, SLURM_JWT_KEY, SLURM_TOKEN_FILE, SLURM_USER (nobody: the
# user jobs run as), SLURM_API_VERSION, SLURM_WORK_DIR (mode 1777: job
# working directories) and SLURM_BIN_DIR (0755: where a caller copies the
# worker binary).
#
# Why it is this way:
#   - Every daemon runs in the foreground (-D / -F) under setsid, so each is
#     the leader of its own session and its PID is what $! says; stop ends
#     whole sessions, which takes the slurmstepd and job processes that
#     slurmd started along (they outlive slurmd otherwise). Nothing is ever
#     killed by name.
#   - The node has 7 fake MIG devices, gpu:1g.18gb:7, backed by character
#     devices with /dev/null's numbers (Slurm only checks they exist).
#   - CPUs is at least 8 with SlurmdParameters=config_overrides so that
#     seven one-slice jobs can run at once on a 2-core CI machine.
#   - MinJobAge stays at its default (300 s): the server reads ended jobs.
#   - KillWait=5 so that a cancel ends a job in seconds.
#   - slurmrestd refuses root: it runs as nobody with SLURM_JWT=daemon and
#     never reads the jwt key (slurmctld, as root, checks the tokens).
# Exit 77 (a skip, for ctest) when not root.
set -u

die() { echo "cluster.sh: $*" >&2; exit 1; }

[ $# -eq 2 ] || { echo "usage: $0 start|stop|stop-rest|start-rest DIR" >&2; exit 2; }
cmd=$1
dir=$2
case "$dir" in /*) ;; *) dir=$(pwd)/$dir ;; esac

if [ "$(id -u)" != 0 ]; then
    echo "cluster.sh: needs root (it runs slurmd and makes device nodes); skipped" >&2
    exit 77
fi

# The session id of process /proc/$1 ("" when it has gone). The command
# name in /proc/PID/stat may hold spaces and ')', so fields are counted
# after its last ')': state, ppid, pgrp, session. (/proc, not ps: a CI
# image may lack procps.)
session_of() {
    local st
    st=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    st=${st##*) }
    set -- $st
    echo "${4:-}"
}

# The sessions to end: each daemon's (DIR/pids, "name pid" lines) and each
# slurmstepd's. slurmstepd leaves slurmd's session (it double-forks and
# calls setsid), so it is found by the log file it inherits from slurmd,
# DIR/log/slurmd.log; its job runs in its session.
our_sessions() {
    local name pid p fd
    # A recorded PID counts while it is still that daemon (/usr/sbin/slurmd
    # and slurmctld are alternatives links, hence readlink -f), or has gone (a
    # session whose leader died keeps the number, which is not reused
    # while a process is in the session).
    [ -f "$dir/pids" ] && while read -r name pid; do
        [ -n "$pid" ] || continue
        case "$(readlink "/proc/$pid/exe" 2>/dev/null)" in
            ''|"$(readlink -f "/usr/sbin/$name")") echo "$pid" ;;
        esac
    done <"$dir/pids"
    for p in /proc/[0-9]*; do
        for fd in "$p"/fd/*; do
            if [ "$(readlink "$fd" 2>/dev/null)" = "$dir/log/slurmd.log" ]; then
                session_of "${p#/proc/}"
                break
            fi
        done
    done
}

# The processes in sessions $sids.
members() {
    local p pid s want
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        s=$(session_of "$pid")
        [ -n "$s" ] || continue
        for want in $sids; do
            [ "$s" = "$want" ] && echo "$pid"
        done
    done
}

stop_cluster() {
    [ -f "$dir/pids" ] || { rm -rf "$dir/dev"; return 0; }
    # Jobs first, while slurmctld still answers, so that slurmd ends them.
    local ctld
    ctld=$(awk '$1 == "slurmctld" {print $2}' "$dir/pids")
    if [ -n "$ctld" ] && kill -0 "$ctld" 2>/dev/null &&
       [ -f "$dir/etc/slurm.conf" ] && [ -x /usr/bin/scancel ]; then
        local jobs
        jobs=$(SLURM_CONF=$dir/etc/slurm.conf timeout 5 squeue -h -o %i 2>/dev/null)
        if [ -n "$jobs" ]; then
            SLURM_CONF=$dir/etc/slurm.conf timeout 5 scancel $jobs >/dev/null 2>&1
            for _ in $(seq 100); do
                [ -z "$(SLURM_CONF=$dir/etc/slurm.conf timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
                sleep 0.1
            done
        fi
    fi
    sids=$(our_sessions | sort -u)
    local left
    left=$(members)
    [ -n "$left" ] && kill -TERM $left 2>/dev/null
    for _ in $(seq 50); do
        left=$(members)
        [ -z "$left" ] && break
        sleep 0.1
    done
    left=$(members)
    if [ -n "$left" ]; then
        kill -KILL $left 2>/dev/null
        sleep 0.2
    fi
    rm -f "$dir/pids"
    rm -rf "$dir/dev"
    return 0
}

if [ "$cmd" = stop ]; then
    stop_cluster
    exit 0
fi

# slurmrestd alone, by its recorded PID (a session of its own).
if [ "$cmd" = stop-rest ]; then
    pid=$(awk '$1 == "slurmrestd" {print $2}' "$dir/pids" 2>/dev/null)
    [ -n "$pid" ] || die "no slurmrestd recorded in $dir/pids"
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
    sed -i '/^slurmrestd /d' "$dir/pids"
    exit 0
fi
if [ "$cmd" = start-rest ]; then
    url=$(sed -n 's/^SLURMRESTD_URL=//p' "$dir/env")
    port_rest=${url##*:}
    [ -n "$port_rest" ] || die "no SLURMRESTD_URL in $dir/env"
    cd "$dir" || die "cannot cd to $dir"
    launch() {
        local name=$1
        shift
        setsid "$@" </dev/null >>"$dir/log/$name.out" 2>&1 &
        echo "$name $!" >>"$dir/pids"
    }
    SLURM_CONF=$dir/etc/slurm.conf SLURM_JWT=daemon launch slurmrestd \
        /usr/sbin/slurmrestd -f "$dir/etc/slurm.conf" -u nobody -g nogroup \
        -s openapi/v0.0.38 "127.0.0.1:$port_rest"
    token=$(cat "$dir/etc/token")
    for _ in $(seq 100); do
        code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 \
               -H "X-SLURM-USER-NAME: nobody" -H "X-SLURM-USER-TOKEN: $token" \
               "$url/slurm/v0.0.38/ping" 2>/dev/null)
        [ "$code" = 200 ] && exit 0
        sleep 0.1
    done
    die "slurmrestd did not answer again on port $port_rest"
fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop|stop-rest|start-rest DIR" >&2; exit 2; }

# ---- packages ----
need_install=0
for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/slurmrestd \
         /usr/sbin/munged /usr/bin/scontrol /usr/bin/curl; do
    [ -x "$b" ] || need_install=1
done
jwt_plugin=$(ls /usr/lib/*/slurm-wlm/auth_jwt.so 2>/dev/null | head -1)
[ -n "$jwt_plugin" ] || need_install=1
if [ $need_install = 1 ]; then
    pkgs="slurm-wlm slurmrestd slurm-wlm-jwt-plugin munge curl"
    echo "cluster.sh: installing $pkgs" >&2
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y $pkgs >"${TMPDIR:-/tmp}/cluster-apt.log" 2>&1; then
        apt-get update >>"${TMPDIR:-/tmp}/cluster-apt.log" 2>&1
        apt-get install -y $pkgs >>"${TMPDIR:-/tmp}/cluster-apt.log" 2>&1 ||
            die "apt-get install $pkgs failed; see ${TMPDIR:-/tmp}/cluster-apt.log"
    fi
fi

# ---- a fresh folder ----
if [ -f "$dir/pids" ]; then
    stop_cluster
fi
mkdir -p "$dir" || die "cannot make $dir"
chmod 755 "$dir"
rm -rf "$dir/etc" "$dir/munge" "$dir/state" "$dir/spool" "$dir/log" \
       "$dir/run" "$dir/dev" "$dir/env"
mkdir -p "$dir/etc" "$dir/munge" "$dir/state" "$dir/spool" "$dir/log" \
         "$dir/run" "$dir/dev" "$dir/work" "$dir/bin"
chmod 755 "$dir/etc" "$dir/dev" "$dir/log" "$dir/bin"
# munge/ is 755: jobs run as nobody reach munged's socket in it (the key
# itself is 400).
chmod 755 "$dir/munge"
chmod 700 "$dir/state" "$dir/spool"
chmod 1777 "$dir/work"
: >"$dir/pids"

node=$(uname -n | cut -d. -f1)
case "$node" in ''|*[!A-Za-z0-9-]*) node=trainyard-node ;; esac
cpus=$(nproc)
[ "$cpus" -ge 8 ] || cpus=8
mem=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
[ -n "$mem" ] && [ "$mem" -gt 512 ] || mem=1024

# Three free TCP ports on the loopback (the kernel picks; tiny race only).
read -r port_ctld port_slurmd port_rest < <(/usr/bin/python3 - <<'EOF'
import socket
socks = []
for _ in range(3):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
)
[ -n "${port_rest:-}" ] || die "could not find free ports"

# ---- munge ----
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
munge_socket=$dir/munge/munge.socket.2

# ---- jwt key: 32 random bytes, read by slurmctld (root) only ----
dd if=/dev/urandom of="$dir/etc/jwt.key" bs=32 count=1 status=none
chmod 600 "$dir/etc/jwt.key"

# ---- fake GPU devices ----
for i in 0 1 2 3 4 5 6; do
    mknod -m 666 "$dir/dev/gpu$i" c 1 3 || die "mknod $dir/dev/gpu$i failed"
done

conf=$dir/etc/slurm.conf
cat >"$conf" <<EOF
# Written by tests/slurm/cluster.sh: a single node on 127.0.0.1.
ClusterName=trainyard
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port_ctld
SlurmdPort=$port_slurmd
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_socket
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$dir/etc/jwt.key
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
KillWait=5
ReturnToService=2
GresTypes=gpu
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:1g.18gb:7 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$dir/etc/gres.conf" <<EOF
NodeName=$node Name=gpu Type=1g.18gb File=$dir/dev/gpu[0-6]
EOF
chmod 644 "$conf" "$dir/etc/gres.conf"

# Starts "$@" as its own session in the background; records name and PID.
launch() {
    local name=$1
    shift
    setsid "$@" </dev/null >"$dir/log/$name.out" 2>&1 &
    echo "$name $!" >>"$dir/pids"
}

tails() {
    for f in "$dir"/log/*; do
        [ -f "$f" ] || continue
        echo "---- $f (last lines) ----" >&2
        tail -n 15 "$f" >&2
    done
}

# Stops what started (first: a reader that went away must not leave
# daemons running), then says why with the logs' tails.
fail_start() {
    stop_cluster
    echo "cluster.sh: $*" >&2
    tails
    exit 1
}

launch munged /usr/sbin/munged -F -f --socket="$munge_socket" \
    --key-file="$dir/munge/munge.key" --pid-file="$dir/run/munged.pid" \
    --seed-file="$dir/munge/munged.seed" --log-file="$dir/log/munged.log"
for _ in $(seq 50); do
    [ -S "$munge_socket" ] && break
    sleep 0.1
done
[ -S "$munge_socket" ] || fail_start "munged did not make $munge_socket"

export SLURM_CONF=$conf
# The daemons' working folder: not the caller's (which they would pin).
cd "$dir" || die "cannot cd to $dir"
launch slurmctld /usr/sbin/slurmctld -D -c -f "$conf"
launch slurmd /usr/sbin/slurmd -D -f "$conf" -N "$node"
# slurmrestd: -u/-g drop root after it opens the socket; only v0.0.38's
# plugin (the dbv0.0.38 one is fatal without slurmdbd).
SLURM_JWT=daemon launch slurmrestd /usr/sbin/slurmrestd -f "$conf" \
    -u nobody -g nogroup -s openapi/v0.0.38 "127.0.0.1:$port_rest"

# The name of a recorded daemon that has exited, if any.
dead_daemon() {
    local name pid
    while read -r name pid; do
        kill -0 "$pid" 2>/dev/null || { echo "$name"; return; }
    done <"$dir/pids"
}

# ---- a token for the token-file mode ----
token=
dead=
for _ in $(seq 100); do
    dead=$(dead_daemon)
    [ -z "$dead" ] || break
    token=$(scontrol token username=nobody lifespan=7200 2>/dev/null |
            sed -n 's/^SLURM_JWT=//p')
    [ -n "$token" ] && break
    sleep 0.1
done
[ -z "$dead" ] || fail_start "$dead exited during start"
[ -n "$token" ] || fail_start "scontrol token failed (slurmctld not answering)"
umask 077
printf '%s\n' "$token" >"$dir/etc/token"
umask 022

# ---- ready: the node idle and slurmrestd answering ----
ready=0
for _ in $(seq 300); do
    dead=$(dead_daemon)
    [ -z "$dead" ] || fail_start "$dead exited during start"
    state=$(scontrol -o show node "$node" 2>/dev/null |
            sed -n 's/.* State=\([^ ]*\).*/\1/p')
    code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 \
           -H "X-SLURM-USER-NAME: nobody" -H "X-SLURM-USER-TOKEN: $token" \
           "http://127.0.0.1:$port_rest/slurm/v0.0.38/ping" 2>/dev/null)
    if [ "$state" = IDLE ] && [ "$code" = 200 ]; then
        ready=1
        break
    fi
    sleep 0.1
done
[ $ready = 1 ] || fail_start "not ready after 30 s: node state '${state:-?}', slurmrestd HTTP '${code:-?}'"

cat >"$dir/env" <<EOF
SLURM_CONF=$conf
SLURMRESTD_URL=http://127.0.0.1:$port_rest
SLURM_JWT_KEY=$dir/etc/jwt.key
SLURM_TOKEN_FILE=$dir/etc/token
SLURM_USER=nobody
SLURM_API_VERSION=v0.0.38
SLURM_NODE=$node
SLURM_WORK_DIR=$dir/work
SLURM_BIN_DIR=$dir/bin
SLURM_DIR=$dir
EOF
echo "$dir/env"
