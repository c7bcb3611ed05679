#!/bin/bash
# cluster.sh - a Slurm for the tests: munged, slurmctld, slurmd and
# slurmrestd, all under one folder. One node on 127.0.0.1, or (start-multi)
# NODES nodes, each in its own network and UTS namespace, on one machine.
#
#   tests/slurm/cluster.sh start DIR   prints the path of DIR/env when the
#                                      node is idle and slurmrestd answers
#   tests/slurm/cluster.sh start-multi DIR [NODES]   the same with NODES
#                                      nodes node1..nodeN (default 2, 1 to
#                                      8), every one idle
#   tests/slurm/cluster.sh stop DIR    ends every daemon and job it started
#                                      and removes every namespace, bridge
#                                      and veth it made; safe twice and after
#                                      a failed start
#   tests/slurm/cluster.sh kill-node DIR NODE   (multi) the node dies: every
#                                      process in its namespace (slurmd,
#                                      slurmstepd, the job's tasks) gets
#                                      SIGKILL and its link goes down
#   tests/slurm/cluster.sh kill-slurmd DIR NODE (multi) SIGKILL of the node's
#                                      slurmd session alone: its job steps
#                                      (slurmstepd, tasks) go on running,
#                                      orphans, until a slurmd starts there
#                                      again (Slurm then ends them)
#   tests/slurm/cluster.sh start-node DIR NODE  (multi) brings it back: link
#                                      up, a fresh slurmd, node IDLE
#   tests/slurm/cluster.sh stop-rest DIR   stops slurmrestd alone (an outage:
#                                      slurmctld, slurmd and jobs go on)
#   tests/slurm/cluster.sh start-rest DIR  starts it again on the same port
#
# DIR/env (shell syntax, one NAME=value a line) holds SLURM_CONF,
# SLURMRESTD_URL, SLURM_JWT_KEY, SLURM_TOKEN_FILE, SLURM_USER (nobody: the
# user jobs run as), SLURM_API_VERSION, SLURM_WORK_DIR (mode 1777: job
# working directories) and SLURM_BIN_DIR (0755: where a caller copies the
# worker binary); start-multi adds SLURM_NODES (node1,node2), SLURM_SUBNET
# (10.213.X.0/24) and SLURM_CTLD_ADDR, and SLURM_NODE is node1.
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
#
# The multi-node mode (start-multi), for gangs of ranks over several nodes
# (issue 33) without any machine but this one:
#   - slurmctld, munged and slurmrestd run in the root namespaces; each
#     slurmd runs in a network namespace of its own (`ip netns`, named
#     ty-TAG-nodeK, TAG from DIR's path) and, inside it, a UTS namespace
#     whose hostname is nodeK. The job steps (slurmstepd and the tasks) are
#     slurmd's children and stay in both namespaces, so each task sees its
#     node's name and address, as on separate machines.
#   - A bridge tybTAG in the root namespace holds 10.213.X.1/24, the
#     address slurmctld is reached at (SlurmctldHost); each node has a veth
#     pair, host end tyTAGnK on the bridge, the other end eth0 in the node's
#     namespace at 10.213.X.(K+1). The nodes reach each other over the
#     bridge (srun, PMIx and MPI traffic between nodes); no route leads
#     out of the machine, and nothing forwards. X is the first of 0..255,
#     counted from a hash of DIR, that no address or route on the machine
#     uses (chosen under a lock, so clusters started at once differ).
#   - Unix sockets (munged's) are reached by path, across namespaces. The
#     nodes share the machine's files; TmpFS is DIR/tmp/NODE, since PMIx
#     names its folders there by job and step alone.
#   - Node loss is noticed in seconds, not minutes: slurmctld pings every
#     SlurmdTimeout/3 = 2 s; a ping to a dead node fails after about
#     MessageTimeout + 1 = 4 s of connect retries and marks it NOT_RESPONDING;
#     the first failed ping after SlurmdTimeout=6 s without an answer marks
#     it DOWN, which ends its jobs as NODE_FAIL (JobRequeue=0: Slurm does
#     not requeue them itself; the caller decides) and their steps on the
#     other nodes. Bound: about 2 + 6 + 2 x 4 = 16 s; measured 12-13 s
#     (tests/slurm/test_multinode.py prints it). The defaults (300 s, 10 s)
#     would take minutes. A slurmd answers a ping in milliseconds, so even
#     a loaded 2-core machine stays well inside 3 s.
#   - Node names resolve nowhere (no /etc/hosts entry): Slurm uses the
#     NodeAddr addresses; a program that looks up node1 by name will not
#     find it.
#   - Each node keeps the single node's fake GRES (gpu:1g.18gb:7) and CPU
#     override, so a job asking gres works the same on either.
# Exit 77 (a skip, for ctest) when not root, and in start-multi when this
# machine cannot make network namespaces, bridges or veth pairs (an
# unprivileged container), with the reason on stderr.
set -u

die() { echo "cluster.sh: $*" >&2; exit 1; }

usage() {
    echo "usage: $0 start|start-multi|stop|stop-rest|start-rest|kill-node|kill-slurmd|start-node DIR [NODES|NODE]" >&2
    exit 2
}
[ $# -ge 2 ] && [ $# -le 3 ] || usage
cmd=$1
dir=$2
arg=${3:-}
case "$dir" in /*) ;; *) dir=$(pwd)/$dir ;; esac

# The names of what start-multi makes, from DIR's path (two clusters in
# two folders never share a name; interface names stay within 15 bytes).
tag=$(printf '%s' "$dir" | cksum | awk '{printf "%06x", $1 % 16777216}')
bridge=tyb$tag
netns_of() { echo "ty-$tag-$1"; }
veth_of() { echo "ty${tag}n${1#node}"; }

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
# DIR/log/slurmd.log (slurmd-NODE.log in start-multi); its job runs in its
# session.
our_sessions() {
    local name pid
    # A recorded PID counts while it is still that daemon (/usr/sbin/slurmd
    # and slurmctld are alternatives links, hence readlink -f), or has gone (a
    # session whose leader died keeps the number, which is not reused
    # while a process is in the session).
    [ -f "$dir/pids" ] && while read -r name pid _; do
        [ -n "$pid" ] || continue
        case "$(readlink "/proc/$pid/exe" 2>/dev/null)" in
            ''|"$(readlink -f "/usr/sbin/$name")") echo "$pid" ;;
        esac
    done <"$dir/pids"
    # One find over every process's open files (-lname matches where the
    # link points), not a readlink per file: seconds on a busy machine.
    find /proc/[0-9]*/fd -maxdepth 1 \( -lname "$dir/log/slurmd.log" -o \
         -lname "$dir/log/slurmd-*.log" \) 2>/dev/null |
        while IFS=/ read -r _ _ pid _; do
            session_of "$pid"
        done
}

# The processes in sessions $sids: one pass of awk over every
# /proc/PID/stat (the session is the 4th field after the command name's
# last ')'), not a shell per process, so that a wait loop stays quick on a
# busy machine. cat, not awk, opens the files: a process gone meanwhile is
# skipped.
members() {
    cat /proc/[0-9]*/stat 2>/dev/null |
        awk -v want=" $(echo $sids) " '{
            rest = $0
            sub(/.*\) /, "", rest)
            split(rest, f, " ")
            if (index(want, " " f[4] " ")) print $1
        }'
}

# Every process left in the nodes' network namespaces gets SIGKILL; then
# the namespaces, veths and bridge recorded in DIR/net go. (Names are
# recorded before each is made, so a failed start leaves none behind.)
remove_net() {
    [ -f "$dir/net" ] || return 0
    local kind name pids
    while read -r kind name; do
        [ "$kind" = netns ] || continue
        pids=$(ip netns pids "$name" 2>/dev/null)
        [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    done <"$dir/net"
    for _ in $(seq 20); do
        pids=
        while read -r kind name; do
            [ "$kind" = netns ] && pids=$pids$(ip netns pids "$name" 2>/dev/null)
        done <"$dir/net"
        [ -z "$pids" ] && break
        sleep 0.1
    done
    while read -r kind name; do
        case "$kind" in
            netns) ip netns del "$name" 2>/dev/null ;;
            link) ip link del "$name" 2>/dev/null ;;
        esac
    done <"$dir/net"
    rm -f "$dir/net"
}

stop_cluster() {
    [ -f "$dir/pids" ] || { remove_net; rm -rf "$dir/dev"; return 0; }
    # Jobs first, while slurmctld still answers, so that slurmd ends them.
    local ctld until
    ctld=$(awk '$1 == "slurmctld" {print $2}' "$dir/pids")
    if [ -n "$ctld" ] && kill -0 "$ctld" 2>/dev/null &&
       [ -f "$dir/etc/slurm.conf" ] && [ -x /usr/bin/scancel ]; then
        local jobs
        jobs=$(SLURM_CONF=$dir/etc/slurm.conf timeout 5 squeue -h -o %i 2>/dev/null)
        if [ -n "$jobs" ]; then
            SLURM_CONF=$dir/etc/slurm.conf timeout 5 scancel $jobs >/dev/null 2>&1
            # Up to 10 s by the clock (a job of a lost node stays
            # COMPLETING until the node returns; the sessions go below).
            until=$((SECONDS + 10))
            while [ $SECONDS -lt $until ]; do
                [ -z "$(SLURM_CONF=$dir/etc/slurm.conf timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
                sleep 0.1
            done
        fi
    fi
    sids=$(our_sessions | sort -u)
    local left
    left=$(members)
    [ -n "$left" ] && kill -TERM $left 2>/dev/null
    # Up to 5 s for SIGTERM (a slurmstepd of a job whose node failed may
    # ignore it for longer), then SIGKILL.
    until=$((SECONDS + 5))
    while [ $SECONDS -lt $until ]; do
        left=$(members)
        [ -z "$left" ] && break
        sleep 0.1
    done
    left=$(members)
    if [ -n "$left" ]; then
        kill -KILL $left 2>/dev/null
        sleep 0.2
    fi
    remove_net
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

# Starts slurmd for node $1 in its namespaces: the network one made by
# start-multi (entered with nsenter, not `ip netns exec`, whose fresh /sys
# has no cgroup mount, which slurmd needs), and a UTS one (unshare) whose
# hostname is the node's name.
# Every step execs the next, so the PID recorded is slurmd's and its
# session is slurmd's alone.
start_slurmd() {
    local n=$1
    setsid nsenter --net="/run/netns/$(netns_of "$n")" unshare --uts -- \
        /bin/sh -c 'hostname "$1" && exec /usr/sbin/slurmd -D -f "$2" -N "$1"' \
        sh "$n" "$dir/etc/slurm.conf" </dev/null >>"$dir/log/slurmd-$n.out" 2>&1 &
    echo "slurmd $! $n" >>"$dir/pids"
}

# The state of node $1 as scontrol says it (IDLE, DOWN*, ...).
node_state() {
    SLURM_CONF=$dir/etc/slurm.conf scontrol -o show node "$1" 2>/dev/null |
        sed -n 's/.* State=\([^ ]*\).*/\1/p'
}

# kill-node / kill-slurmd / start-node: a node of a start-multi cluster
# dies / loses its slurmd / comes back.
if [ "$cmd" = kill-node ] || [ "$cmd" = kill-slurmd ] || [ "$cmd" = start-node ]; then
    n=$arg
    case "$n" in node[1-8]) ;; *) die "NODE must be node1..node8, not '$n'" ;; esac
    grep -qx "netns $(netns_of "$n")" "$dir/net" 2>/dev/null ||
        die "$n is not a node of the cluster in $dir (start-multi makes them)"
    if [ "$cmd" = kill-slurmd ]; then
        pid=$(awk -v n="$n" '$1 == "slurmd" && $3 == n {print $2}' "$dir/pids")
        [ -n "$pid" ] || die "no slurmd recorded for $n in $dir/pids"
        sids=$pid
        left=$(members)
        [ -n "$left" ] && kill -KILL $left 2>/dev/null
        awk -v n="$n" '!($1 == "slurmd" && $3 == n)' "$dir/pids" >"$dir/pids.new" &&
            mv "$dir/pids.new" "$dir/pids"
        exit 0
    fi
    if [ "$cmd" = kill-node ]; then
        # Everything in its network namespace at once, as a power cut
        # would; then the link goes down, so the node's address answers
        # nothing (no refusals) until start-node.
        for _ in 1 2 3; do
            pids=$(ip netns pids "$(netns_of "$n")")
            [ -n "$pids" ] || break
            kill -KILL $pids 2>/dev/null
            sleep 0.1
        done
        ip link set "$(veth_of "$n")" down
        awk -v n="$n" '!($1 == "slurmd" && $3 == n)' "$dir/pids" >"$dir/pids.new" &&
            mv "$dir/pids.new" "$dir/pids"
        exit 0
    fi
    pid=$(awk -v n="$n" '$1 == "slurmd" && $3 == n {print $2}' "$dir/pids")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && die "$n's slurmd is running (PID $pid)"
    ip link set "$(veth_of "$n")" up || die "cannot bring $(veth_of "$n") up"
    cd "$dir" || die "cannot cd to $dir"
    start_slurmd "$n"
    # ReturnToService=2: a DOWN node that registers is IDLE again.
    for _ in $(seq 300); do
        [ "$(node_state "$n")" = IDLE ] && exit 0
        sleep 0.1
    done
    die "$n is not IDLE 30 s after its slurmd started: '$(node_state "$n")'"
fi

case "$cmd" in
    start) nodes=0 ;;
    start-multi)
        nodes=${arg:-2}
        case "$nodes" in [1-8]) ;; *) die "NODES must be 1..8, not '$nodes'" ;; esac
        ;;
    *) usage ;;
esac

# ---- packages ----
need_install=0
for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/slurmrestd \
         /usr/sbin/munged /usr/bin/scontrol /usr/bin/curl; do
    [ -x "$b" ] || need_install=1
done
jwt_plugin=$(ls /usr/lib/*/slurm-wlm/auth_jwt.so 2>/dev/null | head -1)
[ -n "$jwt_plugin" ] || need_install=1
[ "$nodes" -gt 0 ] && ! command -v ip >/dev/null && need_install=1
if [ $need_install = 1 ]; then
    pkgs="slurm-wlm slurmrestd slurm-wlm-jwt-plugin munge curl iproute2"
    echo "cluster.sh: installing $pkgs" >&2
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y $pkgs >"${TMPDIR:-/tmp}/cluster-apt.log" 2>&1; then
        apt-get update >>"${TMPDIR:-/tmp}/cluster-apt.log" 2>&1
        apt-get install -y $pkgs >>"${TMPDIR:-/tmp}/cluster-apt.log" 2>&1 ||
            die "apt-get install $pkgs failed; see ${TMPDIR:-/tmp}/cluster-apt.log"
    fi
fi

# start-multi needs namespaces, a bridge and veth pairs: a machine that
# cannot make them (an unprivileged container, a kernel without veth) is
# a skip, said plainly, before anything starts.
skip() { echo "cluster.sh: $*; skipped" >&2; exit 77; }
if [ "$nodes" -gt 0 ]; then
    command -v ip >/dev/null || skip "start-multi needs ip (iproute2)"
    for t in unshare nsenter flock; do
        command -v $t >/dev/null || skip "start-multi needs $t (util-linux)"
    done
    err=$(unshare --uts --net -- true 2>&1) ||
        skip "cannot make network and UTS namespaces: $err"
    probe=typ$tag
    err=$(ip link add "$probe" type veth peer name "${probe}b" 2>&1) ||
        skip "cannot make a veth pair: $err"
    ip link del "$probe" 2>/dev/null
    err=$(ip link add "$probe" type bridge 2>&1) ||
        skip "cannot make a bridge: $err"
    ip link del "$probe" 2>/dev/null
    err=$(ip netns add "ty-$tag-probe" 2>&1) ||
        skip "cannot make a named network namespace (ip netns add): $err"
    ip netns del "ty-$tag-probe" 2>/dev/null
fi

# ---- a fresh folder ----
if [ -f "$dir/pids" ] || [ -f "$dir/net" ]; then
    stop_cluster
fi
mkdir -p "$dir" || die "cannot make $dir"
chmod 755 "$dir"
rm -rf "$dir/etc" "$dir/munge" "$dir/state" "$dir/spool" "$dir/log" \
       "$dir/run" "$dir/dev" "$dir/env" "$dir/tmp"
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

# ---- start-multi: the bridge, and a namespace and veth per node ----
# fail_net undoes what was made and says why: a failure here, after the
# probes above passed, is an error, not a skip.
fail_net() {
    remove_net
    die "$*"
}
if [ "$nodes" -gt 0 ]; then
    : >"$dir/net"
    # The subnet: 10.213.X.0/24 for the first X, counted from a hash of
    # DIR, that no address or route here uses; picked and taken (the
    # bridge's address) under a lock, so that clusters started at once
    # take different ones.
    exec 9>"${TMPDIR:-/tmp}/trainyard-slurm-net.lock"
    flock -w 60 9 || die "could not take ${TMPDIR:-/tmp}/trainyard-slurm-net.lock"
    used=$( { ip -4 -o addr show; ip -4 route show table all; } 2>/dev/null)
    start_x=$(( 0x$tag % 256 ))
    subnet_x=
    for i in $(seq 0 255); do
        x=$(( (start_x + i) % 256 ))
        if ! printf '%s\n' "$used" | grep -q "10\.213\.$x\."; then
            subnet_x=$x
            break
        fi
    done
    [ -n "$subnet_x" ] || { exec 9>&-; die "every 10.213.X.0/24 is in use here"; }
    subnet=10.213.$subnet_x
    echo "link $bridge" >>"$dir/net"
    { ip link add "$bridge" type bridge &&
      ip addr add "$subnet.1/24" dev "$bridge" &&
      ip link set "$bridge" up; } 2>"$dir/log/net.err" ||
        { exec 9>&-; fail_net "cannot make bridge $bridge: $(cat "$dir/log/net.err")"; }
    exec 9>&-
    node_list=
    for k in $(seq 1 "$nodes"); do
        n=node$k
        ns=$(netns_of "$n")
        veth=$(veth_of "$n")
        echo "netns $ns" >>"$dir/net"
        echo "link $veth" >>"$dir/net"
        { ip netns add "$ns" &&
          ip link add "$veth" type veth peer name eth0 netns "$ns" &&
          ip link set "$veth" master "$bridge" &&
          ip link set "$veth" up &&
          ip -n "$ns" addr add "$subnet.$((k + 1))/24" dev eth0 &&
          ip -n "$ns" link set eth0 up &&
          ip -n "$ns" link set lo up; } 2>"$dir/log/net.err" ||
            fail_net "cannot make $n's namespace $ns: $(cat "$dir/log/net.err")"
        # slurmd makes its spool folder 755 (the job user runs the batch
        # script from it); the folder above must let that user through.
        mkdir -p "$dir/spool/$n" "$dir/tmp/$n"
        chmod 755 "$dir/spool"
        chmod 1777 "$dir/tmp/$n"
        node_list=${node_list:+$node_list,}$n
    done
    rm -f "$dir/log/net.err"
fi

conf=$dir/etc/slurm.conf
if [ "$nodes" -gt 0 ]; then
    ctld_addr=$subnet.1
    spool=$dir/spool/%n
    slurmd_pid=$dir/run/slurmd-%n.pid
    slurmd_log=$dir/log/slurmd-%n.log
    # Node loss noticed in seconds (see the header); Slurm leaves a job of
    # a failed node ended (NODE_FAIL), not requeued.
    # TmpFS per node: PMIx makes its client folders under it, named by
    # job and step alone, which two nodes sharing /tmp would both make.
    extra="SlurmdTimeout=6
MessageTimeout=3
JobRequeue=0
TmpFS=$dir/tmp/%n
"
    node_lines=
    for k in $(seq 1 "$nodes"); do
        node_lines="${node_lines}NodeName=node$k NodeAddr=$subnet.$((k + 1)) NodeHostname=node$k CPUs=$cpus RealMemory=$mem Gres=gpu:1g.18gb:7 State=UNKNOWN
"
    done
    gres_nodes="node[1-$nodes]"
    what="$nodes nodes in network namespaces on $subnet.0/24"
else
    ctld_addr=127.0.0.1
    spool=$dir/spool
    slurmd_pid=$dir/run/slurmd.pid
    slurmd_log=$dir/log/slurmd.log
    extra=
    node_lines="NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:1g.18gb:7 State=UNKNOWN
"
    gres_nodes=$node
    what="a single node on 127.0.0.1"
fi
cat >"$conf" <<EOF
# Written by tests/slurm/cluster.sh: $what.
ClusterName=trainyard
SlurmctldHost=$node($ctld_addr)
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
SlurmdSpoolDir=$spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$slurmd_pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$slurmd_log
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
${extra}${node_lines}PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$dir/etc/gres.conf" <<EOF
NodeName=$gres_nodes Name=gpu Type=1g.18gb File=$dir/dev/gpu[0-6]
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
if [ "$nodes" -gt 0 ]; then
    for k in $(seq 1 "$nodes"); do
        start_slurmd "node$k"
    done
else
    launch slurmd /usr/sbin/slurmd -D -f "$conf" -N "$node"
fi
# slurmrestd: -u/-g drop root after it opens the socket; only v0.0.38's
# plugin (the dbv0.0.38 one is fatal without slurmdbd).
SLURM_JWT=daemon launch slurmrestd /usr/sbin/slurmrestd -f "$conf" \
    -u nobody -g nogroup -s openapi/v0.0.38 "127.0.0.1:$port_rest"

# The name of a recorded daemon that has exited, if any.
dead_daemon() {
    local name pid
    while read -r name pid rest; do
        kill -0 "$pid" 2>/dev/null || { echo "$name${rest:+ ($rest)}"; return; }
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

# ---- ready: every node idle and slurmrestd answering ----
if [ "$nodes" -gt 0 ]; then
    want_idle=$(seq -f 'node%g' 1 "$nodes")
else
    want_idle=$node
fi
ready=0
for _ in $(seq 300); do
    dead=$(dead_daemon)
    [ -z "$dead" ] || fail_start "$dead exited during start"
    state=
    all_idle=1
    for n in $want_idle; do
        s=$(node_state "$n")
        state="$state $n=${s:-?}"
        [ "$s" = IDLE ] || all_idle=0
    done
    code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 \
           -H "X-SLURM-USER-NAME: nobody" -H "X-SLURM-USER-TOKEN: $token" \
           "http://127.0.0.1:$port_rest/slurm/v0.0.38/ping" 2>/dev/null)
    if [ $all_idle = 1 ] && [ "$code" = 200 ]; then
        ready=1
        break
    fi
    sleep 0.1
done
[ $ready = 1 ] || fail_start "not ready after 30 s: node state${state:- ?}, slurmrestd HTTP '${code:-?}'"

cat >"$dir/env" <<EOF
SLURM_CONF=$conf
SLURMRESTD_URL=http://127.0.0.1:$port_rest
SLURM_JWT_KEY=$dir/etc/jwt.key
SLURM_TOKEN_FILE=$dir/etc/token
SLURM_USER=nobody
SLURM_API_VERSION=v0.0.38
SLURM_NODE=$(set -- $want_idle; echo "$1")
SLURM_WORK_DIR=$dir/work
SLURM_BIN_DIR=$dir/bin
SLURM_DIR=$dir
EOF
if [ "$nodes" -gt 0 ]; then
    cat >>"$dir/env" <<EOF
SLURM_NODES=$node_list
SLURM_SUBNET=$subnet.0/24
SLURM_CTLD_ADDR=$ctld_addr
EOF
fi
echo "$dir/env"
