#!/usr/bin/env bash
# A throwaway single-machine Ceph cluster for tests, benchmarks and trying the RADOS KV store
# (docs/kv-store-rados.md):
#   scripts/ceph-test-cluster.sh start DIR        one monitor, one manager, three memstore OSDs,
#                                                 cephx on, EC pool `kv` (k=2 m=1, failure
#                                                 domain osd, min_size 2); prints the
#                                                 --kv-store URL. DIR must not hold a cluster.
#   scripts/ceph-test-cluster.sh stop DIR         stops every daemon of DIR and removes DIR
#   scripts/ceph-test-cluster.sh stop-osd DIR N   kills osd.N (SIGKILL: a crash / lost disk)
#   scripts/ceph-test-cluster.sh start-osd DIR N  starts osd.N again (memstore lost its data:
#                                                 it rejoins like a replaced disk and backfills)
#   scripts/ceph-test-cluster.sh pause-osd DIR N  SIGSTOPs osd.N (a hung disk / network)
#   scripts/ceph-test-cluster.sh resume-osd DIR N SIGCONTs it
#   scripts/ceph-test-cluster.sh url DIR          the --kv-store URL of the cluster in DIR
# Built by hand the way Ceph's own vstart.sh / ceph-helpers.sh do it: ceph-authtool makes one
# keyring with every daemon's key (so `ceph-mon --mkfs` imports all of them), monmaptool the
# monitor map, `ceph osd new` registers each OSD, `ceph-osd --mkfs` formats its store.
# Memstore keeps objects in RAM (fast to format and start on 2 busy cores; capped by
# memstore_device_bytes); heartbeat grace of 4 s marks a killed OSD down within seconds.
# Everything (conf, keyring, data, logs, pid files, sockets) lives under DIR; ports are picked
# free at start. With CEPH_TEST_CLUSTER_OWNER_PID set, a watchdog stops the cluster once that
# process is gone (a test binary killed by its timeout leaves no daemons behind). Needs ceph-mon, ceph-osd, ceph-mgr, ceph-common (scripts/install-deps.sh).
set -euo pipefail

usage() {
  echo "usage: $0 start|stop|url DIR | stop-osd|start-osd|pause-osd|resume-osd DIR N" >&2
  exit 2
}
[ $# -ge 2 ] || usage
cmd=$1
dir=$2
POOL=kv
CLIENT=deepinfer
NUM_OSDS=3

ceph_cli() { timeout 60 ceph -c "$dir/ceph.conf" "$@"; }

url() { echo "rados://$POOL?conf=$dir/ceph.conf&id=$CLIENT"; }

port_free() { ! (ss -Htln 2>/dev/null | awk '{print $4}' | grep -qE ":($1)\$"); }

start_osd() {
  local id=$1
  ceph-osd -i "$id" -c "$dir/ceph.conf" 2>>"$dir/log/daemons.stderr"
}

wait_pid_gone() {
  local pid=$1
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
}

case "$cmd" in
  start)
    for b in ceph-mon ceph-osd ceph-mgr ceph ceph-authtool monmaptool rados; do
      command -v "$b" >/dev/null || { echo "$0: $b not found (run scripts/install-deps.sh)" >&2; exit 1; }
    done
    [ ! -e "$dir/ceph.conf" ] || { echo "$0: $dir already holds a cluster (stop it first)" >&2; exit 1; }
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    t0=$(date +%s%N)
    # Ports: the monitor's v2 and v1 ports, then a range for the manager and OSDs.
    for _ in $(seq 1 50); do
      base=$((20000 + (RANDOM % 400) * 100))
      if port_free "$base|$((base + 1))"; then break; fi
    done
    fsid=$(cat /proc/sys/kernel/random/uuid)
    cat > "$dir/ceph.conf" <<EOF
[global]
fsid = $fsid
mon_host = [v2:127.0.0.1:$base,v1:127.0.0.1:$((base + 1))]
public_network = 127.0.0.1/32
ms_bind_port_min = $((base + 2))
ms_bind_port_max = $((base + 99))
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
keyring = $dir/keyring
run_dir = $dir/run
admin_socket = $dir/run/\$name.asok
pid_file = $dir/run/\$name.pid
log_file = $dir/log/\$name.log
crash_dir = $dir/crash
debug_ms = 0
ms_async_op_threads = 1
# One machine: a stopped OSD is reported by its peers (same host) and marked down in seconds.
osd_heartbeat_interval = 1
osd_heartbeat_grace = 4
mon_osd_min_down_reporters = 1
mon_osd_reporter_subtree_level = osd
mon_osd_down_out_interval = 3600
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
mon_data_avail_warn = 2
mon_max_pg_per_osd = 1000
osd_crush_chooseleaf_type = 0
[mon]
mon_data = $dir/mon.\$id
mon_cluster_log_file = $dir/log/cluster.log
mgr_initial_modules =
[mgr]
mgr_data = $dir/mgr.\$id
[osd]
osd_data = $dir/osd.\$id
osd_objectstore = memstore
memstore_device_bytes = 1073741824
osd_memory_target = 939524096
osd_op_num_shards = 1
osd_op_num_threads_per_shard = 2
osd_recovery_sleep = 0
osd_class_load_list = *
osd_class_default_list = *
EOF
    mkdir -p "$dir/run" "$dir/log" "$dir/crash" "$dir/mon.a" "$dir/mgr.x"
    kr=$dir/keyring
    ceph-authtool --create-keyring "$kr" --gen-key -n mon. --cap mon 'allow *' >/dev/null
    ceph-authtool "$kr" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
      --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
    ceph-authtool "$kr" --gen-key -n mgr.x --cap mon 'allow profile mgr' --cap osd 'allow *' \
      --cap mds 'allow *' >/dev/null
    ceph-authtool "$kr" --gen-key -n "client.$CLIENT" --cap mon 'allow r' \
      --cap osd "allow rw pool=$POOL" >/dev/null
    for i in $(seq 0 $((NUM_OSDS - 1))); do
      ceph-authtool "$kr" --gen-key -n "osd.$i" --cap mon 'allow profile osd' \
        --cap mgr 'allow profile osd' --cap osd 'allow *' >/dev/null
    done
    chmod 600 "$kr"
    monmaptool --create --clobber --fsid "$fsid" \
      --addv a "[v2:127.0.0.1:$base,v1:127.0.0.1:$((base + 1))]" "$dir/monmap" >/dev/null
    ceph-mon --mkfs -i a -c "$dir/ceph.conf" --monmap "$dir/monmap" --keyring "$kr"
    ceph-mon -i a -c "$dir/ceph.conf" 2>>"$dir/log/daemons.stderr"
    ceph-mgr -i x -c "$dir/ceph.conf" 2>>"$dir/log/daemons.stderr"
    for i in $(seq 0 $((NUM_OSDS - 1))); do
      uuid=$(cat /proc/sys/kernel/random/uuid)
      echo "$uuid" > "$dir/osd.$i.uuid"
      ceph_cli osd new "$uuid" "$i" >/dev/null
      mkdir -p "$dir/osd.$i"
      ceph-osd -i "$i" -c "$dir/ceph.conf" --mkfs --osd-uuid "$uuid" 2>>"$dir/log/mkfs.log"
      start_osd "$i"
    done
    ceph_cli osd erasure-code-profile set ec21 k=2 m=1 crush-failure-domain=osd >/dev/null
    ceph_cli osd pool create "$POOL" 8 8 erasure ec21 >/dev/null 2>&1
    ceph_cli osd pool set "$POOL" min_size 2 >/dev/null 2>&1
    ceph_cli osd pool application enable "$POOL" deepinfer >/dev/null 2>&1
    # Ready when a write to the pool completes (every PG of it active).
    echo probe > "$dir/probe"
    ok=0
    for _ in $(seq 1 120); do
      if timeout 10 rados -c "$dir/ceph.conf" -p "$POOL" put probe "$dir/probe" 2>/dev/null &&
         timeout 10 rados -c "$dir/ceph.conf" -p "$POOL" rm probe 2>/dev/null; then ok=1; break; fi
      sleep 0.5
    done
    [ $ok = 1 ] || { echo "$0: pool $POOL never became writable (logs in $dir/log)" >&2; exit 1; }
    # Every PG written once, so every one has peered: wait until all are active.
    for _ in $(seq 1 120); do
      if ceph_cli pg stat 2>/dev/null | grep -qE "^[0-9]+ pgs: [0-9]+ active\+clean;"; then break; fi
      sleep 0.5
    done
    if [ -n "${CEPH_TEST_CLUSTER_OWNER_PID:-}" ]; then
      owner=$CEPH_TEST_CLUSTER_OWNER_PID
      self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
      setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 2; done; "$2" stop "$3"' \
        watchdog "$owner" "$self" "$dir" </dev/null >/dev/null 2>&1 &
    fi
    t1=$(date +%s%N)
    ms=$(((t1 - t0) / 1000000))
    printf 'ceph test cluster up in %d.%01d s: %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$(url)"
    ;;
  stop)
    if [ -d "$dir/run" ]; then
      for f in "$dir"/run/*.pid; do
        [ -e "$f" ] || continue
        pid=$(cat "$f" 2>/dev/null || true)
        [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
      done
      for f in "$dir"/run/*.pid; do
        [ -e "$f" ] || continue
        pid=$(cat "$f" 2>/dev/null || true)
        [ -n "$pid" ] && wait_pid_gone "$pid"
      done
    fi
    if [ -e "$dir/ceph.conf" ]; then rm -rf "$dir"; fi
    ;;
  stop-osd)
    [ $# -eq 3 ] || usage
    pid=$(cat "$dir/run/osd.$3.pid")
    kill -9 "$pid"
    wait_pid_gone "$pid"
    rm -f "$dir/run/osd.$3.pid"
    ;;
  start-osd)
    [ $# -eq 3 ] || usage
    # A killed memstore OSD kept nothing: format it again under its old id and uuid (a disk
    # replacement) so it boots and backfills.
    rm -rf "$dir/osd.$3"
    mkdir -p "$dir/osd.$3"
    ceph-osd -i "$3" -c "$dir/ceph.conf" --mkfs --osd-uuid "$(cat "$dir/osd.$3.uuid")" \
      2>>"$dir/log/mkfs.log"
    start_osd "$3"
    ;;
  pause-osd | resume-osd)
    [ $# -eq 3 ] || usage
    if [ "$cmd" = pause-osd ]; then sig=STOP; else sig=CONT; fi
    kill -"$sig" "$(cat "$dir/run/osd.$3.pid")"
    ;;
  url)
    url
    ;;
  *)
    usage
    ;;
esac
