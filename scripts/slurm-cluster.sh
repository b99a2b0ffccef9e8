#!/usr/bin/env bash
# A real SLURM cluster on this machine, for the tests and for trying the `slurm` backend.
#
#   scripts/slurm-cluster.sh start            one node named after this host (ports 6817/6818)
#   scripts/slurm-cluster.sh start-two-node   nodes n1 and n2, one slurmd each (ports 16817, 17001-2)
#   scripts/slurm-cluster.sh stop             stop both (and munged, if this script started it)
#   scripts/slurm-cluster.sh stop-two-node    stop the two-node cluster only
#   scripts/slurm-cluster.sh status           what runs, and `sinfo` of each
#   scripts/slurm-cluster.sh env [two-node]   prints `export SLURM_CONF=...` (use with eval)
#
# Run as root (the daemons run as root, munged as munge). Both clusters can run at the same time:
# they use different ports and state directories. State lives under var/slurm/ in the repository
# (one-node) and var/slurm/two-node/; completed jobs are listed in log/jobcomp.log of each.
# Every client command (sinfo, sbatch, squeue...) needs SLURM_CONF=<dir>/slurm.conf.
#
# Accounting: when slurmdbd and MariaDB are installed (apt-get install slurmdbd mariadb-server), one
# slurmdbd (port 6819, state under var/slurm/dbd/) serves both clusters from the MariaDB database
# slurm_acct_db, so `sacct` lists their jobs and job steps; MariaDB is started if it is down. Without
# them the clusters keep no accounting (AccountingStorageType=accounting_storage/none).
# `start` and `start-two-node` are idempotent: daemons already up are left alone.
# The two-node cluster's nodes have 1 CPU each; AIPERF_SLURM_NODE_CPUS=N declares N (many slots on
# them), AIPERF_SLURM_PROLOG=FILE makes FILE the Prolog of every job (a slow job start). Starting
# with other values restarts its daemons in place.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BASE=$REPO/var/slurm
HOST=$(hostname)

die() { echo "slurm-cluster: $*" >&2; exit 1; }

dir_of() { if [ "$1" = two-node ]; then echo "$BASE/two-node"; else echo "$BASE"; fi; }

pid_alive() {  # pid_alive FILE NAME: the pid in FILE is a running NAME process
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && grep -q "^$2" "/proc/$pid/comm"
}

DBD_PORT=6819
DBD_DIR=$BASE/dbd
DB_USER=aiperf_slurm
DB_PASS=aiperf-test-only  # a throwaway database on 127.0.0.1 of a test machine

have_dbd() { [ -x /usr/sbin/slurmdbd ] && { command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ]; }; }

accounting_lines() {  # the accounting part of slurm.conf: slurmdbd when it can run here, else none
    if have_dbd; then
        printf 'AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=%s\nAccountingStoragePort=%s\n' \
            "$HOST" "$DBD_PORT"
    else
        echo "AccountingStorageType=accounting_storage/none"
    fi
}

node_names() { if [ "$1" = two-node ]; then echo "n1 n2"; else echo "$HOST"; fi; }

slurmd_pidfile() {  # slurmd_pidfile MODE NODE
    local dir; dir=$(dir_of "$1")
    if [ "$1" = two-node ]; then echo "$dir/run/slurmd-$2.pid"; else echo "$dir/run/slurmd.pid"; fi
}

write_conf() {  # write_conf MODE: prints the configuration for MODE
    local mode=$1 dir cpus mem gres_line="" node_gres=""
    dir=$(dir_of "$mode")
    cat <<EOF
# Written by scripts/slurm-cluster.sh ($mode); regenerated on every start.
ClusterName=$([ "$mode" = two-node ] && echo aiperf2n || echo aiperf)
SlurmctldHost=$HOST
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
KillWait=5
# A node whose slurmd stops answering is DOWN after this long (the default, 300 s, outlasts the tests).
SlurmdTimeout=10
MailProg=/bin/true
$(accounting_lines)
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.log
SlurmctldPidFile=$dir/run/slurmctld.pid
StateSaveLocation=$dir/spool/ctld
SlurmctldLogFile=$dir/log/slurmctld.log
EOF
    if [ "$mode" = two-node ]; then
        cat <<EOF
SlurmctldPort=16817
# The nodes' CPUs are as declared here, not this machine's (AIPERF_SLURM_NODE_CPUS may say more).
SlurmdParameters=config_overrides
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmdSpoolDir=$dir/spool/d-%n
SlurmdLogFile=$dir/log/slurmd-%n.log
NodeName=n1 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=17001 CPUs=${AIPERF_SLURM_NODE_CPUS:-1} RealMemory=4000 State=UNKNOWN
NodeName=n2 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=17002 CPUs=${AIPERF_SLURM_NODE_CPUS:-1} RealMemory=4000 State=UNKNOWN
${AIPERF_SLURM_PROLOG:+Prolog=$AIPERF_SLURM_PROLOG}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
        return
    fi
    cpus=$(nproc)
    mem=$(/usr/sbin/slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
    # GPUs of this machine become GRES gpu:N (gres.conf names the device files).
    local ngpu
    ngpu=$(compgen -G '/dev/nvidia[0-9]*' | wc -l || true)
    if [ "$ngpu" -gt 0 ]; then
        gres_line="GresTypes=gpu"
        node_gres=" Gres=gpu:$ngpu"
    fi
    cat <<EOF
${gres_line}
SlurmdPidFile=$dir/run/slurmd.pid
SlurmdSpoolDir=$dir/spool/d
SlurmdLogFile=$dir/log/slurmd.log
NodeName=$HOST CPUs=$cpus RealMemory=${mem:-1000}${node_gres} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

write_gres_conf() {  # only for the one-node cluster, when the machine has GPUs
    local dir=$1 dev
    : > "$dir/gres.conf.tmp"
    for dev in /dev/nvidia[0-9]*; do
        [ -e "$dev" ] && echo "NodeName=$HOST Name=gpu File=$dev" >> "$dir/gres.conf.tmp"
    done
    mv -f "$dir/gres.conf.tmp" "$dir/gres.conf"
}

start_munge() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
    [ -s /etc/munge/munge.key ] || { /usr/sbin/mungekey --create 2>/dev/null || true; chown munge:munge /etc/munge/munge.key; }
    mkdir -p /run/munge && chown munge:munge /run/munge
    runuser -u munge -- /usr/sbin/munged
    local pid
    for _ in $(seq 1 50); do
        if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
            pid=$(cat /run/munge/munged.pid 2>/dev/null || pgrep -u munge -x munged | head -n1 || true)
            echo "$pid" > "$BASE/munged.ours"
            return
        fi
        sleep 0.1
    done
    die "munged did not come up"
}

start_mariadb() {
    if mariadb-admin ping >/dev/null 2>&1; then return; fi
    /etc/init.d/mariadb start >/dev/null 2>&1 || { mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
                                                    (mysqld_safe >/dev/null 2>&1 &); }
    for _ in $(seq 1 60); do
        if mariadb-admin ping >/dev/null 2>&1; then echo mariadb > "$BASE/mariadb.ours"; return; fi
        sleep 0.5
    done
    die "MariaDB did not come up (needed by slurmdbd)"
}

start_dbd() {  # one slurmdbd for both clusters; slurmctld must find it up to register its cluster
    have_dbd || return 0
    mkdir -p "$DBD_DIR"
    if ! pid_alive "$DBD_DIR/slurmdbd.pid" slurmdbd; then
        start_mariadb
        mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
                    CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
                    GRANT ALL ON slurm_acct_db.* TO '$DB_USER'@'localhost';" \
            || die "could not create the accounting database in MariaDB"
        # slurmdbd refuses a slurmdbd.conf others can read; it looks for it next to $SLURM_CONF.
        ( umask 077; cat > "$DBD_DIR/slurmdbd.conf" <<EOF
# Written by scripts/slurm-cluster.sh; regenerated on every start.
AuthType=auth/munge
DbdHost=$HOST
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$DBD_DIR/slurmdbd.pid
LogFile=$DBD_DIR/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=$DB_USER
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
        )
        SLURM_CONF=$DBD_DIR/slurm.conf /usr/sbin/slurmdbd
    fi
    for _ in $(seq 1 120); do  # up once it answers (the first start creates the tables: a few seconds)
        (exec 3<>"/dev/tcp/127.0.0.1/$DBD_PORT") 2>/dev/null && return 0
        sleep 0.25
    done
    tail -n 20 "$DBD_DIR/slurmdbd.log" >&2 || true
    die "slurmdbd did not come up (log: $DBD_DIR/slurmdbd.log)"
}

register_cluster() {  # register_cluster CONF NAME: sacct needs the cluster known to slurmdbd
    have_dbd || return 0
    SLURM_CONF=$1 sacctmgr -n -P list cluster format=Cluster 2>/dev/null | grep -qx "$2" \
        || SLURM_CONF=$1 sacctmgr -i add cluster "$2" >/dev/null
}

cluster_running() {  # all daemons of MODE are alive
    local mode=$1 dir n
    dir=$(dir_of "$mode")
    pid_alive "$dir/run/slurmctld.pid" slurmctld || return 1
    for n in $(node_names "$mode"); do pid_alive "$(slurmd_pidfile "$mode" "$n")" slurmd || return 1; done
}

wait_nodes_up() {  # every node of MODE answers (idle, mixed or allocated)
    local mode=$1 want up
    want=$(node_names "$mode" | wc -w)
    for _ in $(seq 1 120); do
        up=$(SLURM_CONF=$(dir_of "$mode")/slurm.conf sinfo -h -N -o '%N %T' 2>/dev/null \
             | awk '$2 ~ /^(idle|mixed|allocated|completing)$/' | sort -u | wc -l)
        [ "$up" -ge "$want" ] && return 0
        sleep 0.5
    done
    return 1
}

start_cluster() {  # start_cluster MODE
    local mode=$1 dir conf n
    [ "$(id -u)" = 0 ] || die "run as root (the SLURM daemons run as root here)"
    command -v slurmctld >/dev/null || [ -x /usr/sbin/slurmctld ] || die "slurm-wlm is not installed (apt-get install slurm-wlm munge)"
    dir=$(dir_of "$mode")
    conf=$dir/slurm.conf
    mkdir -p "$dir/run" "$dir/spool/ctld" "$dir/log"
    for n in $(node_names "$mode"); do
        if [ "$mode" = two-node ]; then mkdir -p "$dir/spool/d-$n"; else mkdir -p "$dir/spool/d"; fi
    done
    write_conf "$mode" > "$conf.new"
    [ "$mode" = two-node ] || ! grep -q '^GresTypes=gpu' "$conf.new" || write_gres_conf "$dir"
    if [ -f "$conf" ] && ! cmp -s "$conf" "$conf.new" && cluster_running "$mode"; then
        # Restarted in place: slurmctld recovers its jobs from StateSaveLocation and running steps
        # outlive slurmd, so jobs of others using the cluster meanwhile are not cancelled.
        echo "slurm-cluster: configuration changed; restarting the $mode cluster's daemons (jobs are kept)"
        for n in $(node_names "$mode"); do kill_pidfile "$(slurmd_pidfile "$mode" "$n")" slurmd; done
        kill_pidfile "$dir/run/slurmctld.pid" slurmctld
    fi
    mv -f "$conf.new" "$conf"
    touch "$dir/log/jobcomp.log"
    start_munge
    start_dbd
    register_cluster "$conf" "$(sed -n 's/^ClusterName=//p' "$conf")"
    export SLURM_CONF=$conf
    if ! pid_alive "$dir/run/slurmctld.pid" slurmctld; then
        /usr/sbin/slurmctld -f "$conf"
    fi
    for n in $(node_names "$mode"); do
        if ! pid_alive "$(slurmd_pidfile "$mode" "$n")" slurmd; then
            if [ "$mode" = two-node ]; then /usr/sbin/slurmd -f "$conf" -N "$n"; else /usr/sbin/slurmd -f "$conf"; fi
        fi
    done
    if ! wait_nodes_up "$mode"; then
        sinfo -N >&2 || true
        tail -n 20 "$dir"/log/*.log >&2 || true
        die "the $mode cluster did not come up (logs in $dir/log)"
    fi
    # A node left DOWN/DRAIN by an earlier test is usable again.
    for n in $(node_names "$mode"); do
        scontrol update NodeName="$n" State=RESUME >/dev/null 2>&1 || true
    done
    echo "slurm-cluster: $mode cluster up: $(sinfo -h -o '%P %D %T %N' | tr '\n' ' ')"
    echo "export SLURM_CONF=$conf"
}

kill_pidfile() {  # kill_pidfile FILE NAME
    local pid
    pid_alive "$1" "$2" || { rm -f "$1"; return 0; }
    pid=$(cat "$1")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    [ -d "/proc/$pid" ] && kill -9 "$pid" 2>/dev/null || true
    rm -f "$1"
}

stop_cluster() {  # stop_cluster MODE: cancel its jobs, stop its daemons
    local mode=$1 dir n
    dir=$(dir_of "$mode")
    [ -f "$dir/slurm.conf" ] || return 0
    if pid_alive "$dir/run/slurmctld.pid" slurmctld; then
        local jobs
        jobs=$(SLURM_CONF=$dir/slurm.conf squeue -h -o %i 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            # shellcheck disable=SC2086
            SLURM_CONF=$dir/slurm.conf scancel $jobs 2>/dev/null || true
            for _ in $(seq 1 40); do
                [ -z "$(SLURM_CONF=$dir/slurm.conf squeue -h -o %i 2>/dev/null)" ] && break
                sleep 0.25
            done
        fi
    fi
    for n in $(node_names "$mode"); do kill_pidfile "$(slurmd_pidfile "$mode" "$n")" slurmd; done
    kill_pidfile "$dir/run/slurmctld.pid" slurmctld
    echo "slurm-cluster: $mode cluster stopped"
}

stop_munge_if_ours() {
    [ -s "$BASE/munged.ours" ] || return 0
    local pid; pid=$(cat "$BASE/munged.ours")
    if [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && grep -q '^munged' "/proc/$pid/comm"; then
        kill "$pid" 2>/dev/null || true
    fi
    rm -f "$BASE/munged.ours"
}

stop_dbd() {  # and MariaDB, if this script started it
    kill_pidfile "$DBD_DIR/slurmdbd.pid" slurmdbd
    if [ -s "$BASE/mariadb.ours" ]; then
        /etc/init.d/mariadb stop >/dev/null 2>&1 || mariadb-admin shutdown >/dev/null 2>&1 || true
        rm -f "$BASE/mariadb.ours"
    fi
}

status() {
    local mode dir
    for mode in one-node two-node; do
        dir=$(dir_of "$mode")
        if cluster_running "$mode"; then
            echo "$mode: running (SLURM_CONF=$dir/slurm.conf)"
            SLURM_CONF=$dir/slurm.conf sinfo -N -o '  %N %P %T %c %G' 2>&1 || true
        else
            echo "$mode: not running"
        fi
    done
}

case "${1:-}" in
    start) start_cluster one-node ;;
    start-two-node) start_cluster two-node ;;
    stop-two-node) stop_cluster two-node ;;
    stop)
        stop_cluster two-node
        stop_cluster one-node
        stop_dbd
        stop_munge_if_ours
        ;;
    status) status ;;
    env) echo "export SLURM_CONF=$(dir_of "${2:-one-node}")/slurm.conf" ;;
    *) echo "usage: $0 start|start-two-node|stop|stop-two-node|status|env [two-node]" >&2; exit 2 ;;
esac
