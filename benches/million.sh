#!/usr/bin/env bash
# Memory of a target that holds many objects (issue 9: "a target with 1 M objects of metadata
# stays under a documented bound").
#
# Starts one proxy and ONE target (2 mountpaths) as plain `gristd` processes on free ports under
# one work directory, fills a bucket with N tiny objects through the ordinary HTTP API
# (grist-bench PUTs straight to the target, durable: data fsync, rename, directory fsync,
# group-committed index transaction — the same data a user's PUTs leave), and then measures the
# resident memory of both nodes (VmHWM = peak, VmRSS = now, from /proc/<pid>/status) phase by
# phase. Before each phase the peak is reset (`echo 5 > /proc/<pid>/clear_refs`), so every
# row's peak belongs to that phase alone:
#   fill     the N PUTs (grist-bench --mode direct --pct-put 100 --epochs 1)
#   start    the target restarted (SIGTERM, then a new process on the same mountpaths):
#            index open, startup scan of the mountpaths, usage totals, rejoin
#   idle     10 s after the restart
#   list     a full listing of the bucket through the proxy (`grist ls`, default page size),
#            checked to return N names
#   get      random GETs of the whole set through the proxy (grist-bench --mode proxy,
#            32 workers, --get-seconds)
#   list+get both at once
#   rebalance  (with --rebalance) the target restarted, then a second target joins and the
#            first sends it its share; the row's target columns are the sending target's
#            (the walk streams the index, so its peak should not grow with the count)
# Prints one table (phase, seconds, ops, and per node VmHWM / VmRSS in MiB) plus the sizes of
# the index files. Stops everything it started by pid.
#
# Usage: benches/million.sh [--count N] [--size BYTES] [--workers N] [--get-seconds S]
#                           [--dir DIR] [--reuse DIR] [--keep] [--out FILE] [--bin-dir DIR]
#                           [--rebalance]
#   --count N        objects (default 1000000). `--count 20000` is a ~30 s smoke run.
#   --size B         bytes per object (default 16).
#   --workers N      concurrent PUTs of the fill (default 64).
#   --get-seconds S  length of the GET phases (default 30; 5 when --count < 100000).
#   --dir DIR        work directory, must be empty; kept afterwards (default: a new temp dir,
#                    removed at exit unless --keep or a failure).
#   --reuse DIR      a work directory kept by an earlier run (--keep or --dir): skip the fill and
#                    measure the other phases on its data (e.g. with other binaries).
#   --keep           keep the work directory (with the data: N files of ~8 KiB on disk each).
#   --out FILE       also write the report (markdown) to FILE.
#   --rebalance      end with the rebalance phase (changes the data: not for a later --reuse).
#   --bin-dir D      use gristd, grist and grist-bench from D (default: build/release, built
#                    with `cargo build --release -p gristmill-daemon -p gristmill-cli -p gristmill-bench` if absent).
# Needs: python3, curl; ~8.5 GiB of free disk and ~1 M free inodes for the default count.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

count=1000000 size=16 workers=64 get_s="" workdir="" reuse="" keep=0 out="" bindir="" rebalance=0
while [ $# -gt 0 ]; do
  case "$1" in
    --count) count=$2; shift ;;
    --size) size=$2; shift ;;
    --workers) workers=$2; shift ;;
    --get-seconds) get_s=$2; shift ;;
    --dir) workdir=$2; shift ;;
    --reuse) reuse=$2; shift ;;
    --keep) keep=1 ;;
    --out) out=$2; shift ;;
    --bin-dir) bindir=$2; shift ;;
    --rebalance) rebalance=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "million.sh: unknown option $1 (see --help)" >&2; exit 1 ;;
  esac
  shift
done
log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'million.sh: %s\n' "$*" >&2; exit 1; }
case "$count" in '' | *[!0-9]*) die "--count takes a number" ;; esac
if [ -z "$get_s" ]; then
  if [ "$count" -lt 100000 ]; then get_s=5; else get_s=30; fi
fi
for t in python3 curl; do command -v $t >/dev/null || die "$t is required"; done

# --- binaries ------------------------------------------------------------------------------
if [ -z "$bindir" ]; then
  bindir=$root/build/release
  if [ ! -x "$bindir/gristd" ] || [ ! -x "$bindir/grist" ] || [ ! -x "$bindir/grist-bench" ]; then
    log "building release binaries"
    cargo build --release -p gristmill-daemon -p gristmill-cli -p gristmill-bench
  fi
fi
bindir=$(cd "$bindir" && pwd)
GRISTD=$bindir/gristd GRIST=$bindir/grist BENCH=$bindir/grist-bench
for b in "$GRISTD" "$GRIST" "$BENCH"; do [ -x "$b" ] || die "no $b"; done

# --- work dir, cleanup ---------------------------------------------------------------------
if [ -n "$reuse" ]; then
  workdir=$(cd "$reuse" && pwd)
  keep=1
  [ -f "$workdir/filled" ] || die "--reuse $workdir: no completed fill there"
  count=$(cat "$workdir/filled")
elif [ -z "$workdir" ]; then
  workdir=$(mktemp -d "${TMPDIR:-/tmp}/grist-million.XXXXXX")
else
  keep=1
  mkdir -p "$workdir"
  workdir=$(cd "$workdir" && pwd)
  [ -z "$(ls -A "$workdir")" ] || die "--dir $workdir is not empty"
fi

proxy_pid="" target_pid="" target2_pid="" bg_pids=""
stop_pid() { # pid: SIGTERM, wait up to 15 s, then SIGKILL
  local p=$1
  [ -n "$p" ] || return 0
  kill -TERM "$p" 2>/dev/null || return 0
  for _ in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for p in $bg_pids $target2_pid $target_pid $proxy_pid; do stop_pid "$p"; done
  if [ "$keep" = 1 ] || [ "$rc" != 0 ]; then
    echo "work directory kept: $workdir" >&2
  else
    rm -rf "$workdir"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Three consecutive free ports (proxy, target, the target --rebalance adds); a reused directory keeps its ports (the target
# rejoins under the same URL).
if [ -f "$workdir/port" ]; then
  port=$(cat "$workdir/port")
else
  port=$(python3 - <<'EOF'
import random, socket, sys
for _ in range(500):
    base = random.randint(20000, 59990)
    socks = []
    try:
        for p in range(base, base + 3):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        for s in socks:
            s.close()
    print(base)
    sys.exit(0)
sys.exit(1)
EOF
) || die "no free ports"
  echo "$port" >"$workdir/port"
fi
endpoint=http://127.0.0.1:$port
target_url=http://127.0.0.1:$((port + 1))
target2_url=http://127.0.0.1:$((port + 2))
bucket=ais://million
prefix=m/

wait_health() { # url pid name
  for _ in $(seq 3000); do
    curl -fsS -o /dev/null "$1/v1/health" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { tail -20 "$workdir/$3.log" >&2; die "$3 exited"; }
    sleep 0.1
  done
  die "$3 did not answer in 300 s"
}
start_proxy() {
  "$GRISTD" proxy --listen "127.0.0.1:$port" --state-dir "$workdir/proxy" \
    >>"$workdir/proxy.log" 2>&1 &
  proxy_pid=$!
  wait_health "$endpoint" "$proxy_pid" proxy
}
start_target() {
  "$GRISTD" target --listen "127.0.0.1:$((port + 1))" --state-dir "$workdir/target" \
    --join "$endpoint" --mountpath "$workdir/target/mp0" --mountpath "$workdir/target/mp1" \
    >>"$workdir/target.log" 2>&1 &
  target_pid=$!
  wait_health "$target_url" "$target_pid" target
}
# Waits until the proxy routes to the target again (the bucket lists one object).
wait_listing() {
  for _ in $(seq 600); do
    if [ "$("$GRIST" ls "$bucket" --endpoint "$endpoint" --limit 1 2>/dev/null | grep -c "$prefix")" -ge 1 ]; then
      return 0
    fi
    sleep 0.1
  done
  die "the bucket does not list after the target's restart"
}

kib() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
reset_peak() { # pids...: VmHWM := VmRSS
  local p
  for p in "$@"; do echo 5 >"/proc/$p/clear_refs" 2>/dev/null || peak_reset=no; done
}
peak_reset=yes
rows=""
row() { # phase seconds what
  local ph=$1 secs=$2 what=$3
  rows+="| $ph | $secs | $what | $(mib "$(kib "$proxy_pid" VmHWM)") | $(mib "$(kib "$proxy_pid" VmRSS)") | $(mib "$(kib "$target_pid" VmHWM)") | $(mib "$(kib "$target_pid" VmRSS)") | $(mib "$(kib "$target_pid" RssAnon)") | $(kib "$target_pid" Threads) |"$'\n'
  log "$ph: target VmHWM $(mib "$(kib "$target_pid" VmHWM)") MiB, VmRSS $(mib "$(kib "$target_pid" VmRSS)") MiB"
}
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
bench_summary() { # json file op -> "ops, ops/s"
  python3 - "$1" "$2" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("phase") == "final" and r.get("op") == sys.argv[2]:
        print(f"{r['ops']} {sys.argv[2]}s, {r['ops_per_s']:.0f}/s, {r['errors']} errors")
        break
EOF
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
log "work directory $workdir; proxy $endpoint, target $target_url; $count objects of $size B"
start_proxy
start_target

# --- fill ----------------------------------------------------------------------------------
if [ -z "$reuse" ]; then
  reset_peak "$proxy_pid" "$target_pid"
  t0=$(now)
  log "fill: PUT $count objects with $workers workers (durable)"
  "$BENCH" --endpoint "$endpoint" --mode direct --bucket "$bucket" --create-bucket \
    --objects "$count" --size "$size" --prefix "$prefix" --pct-put 100 --epochs 1 \
    --order seq --workers "$workers" --json --interval 0 >"$workdir/fill.json" \
    || die "fill failed (see $workdir/fill.json)"
  row fill "$(since "$t0")" "$(bench_summary "$workdir/fill.json" PUT)"
  echo "$count" >"$workdir/filled"
fi

# --- restart the target: index open and startup scan -----------------------------------------
reset_peak "$proxy_pid"
stop_pid "$target_pid"
t0=$(now)
start_target
wait_listing
row start "$(since "$t0")" "target restarted, rejoined"
reset_peak "$proxy_pid" "$target_pid"
sleep 10
row idle 10 "nothing"

# --- full listing through the proxy ----------------------------------------------------------
reset_peak "$proxy_pid" "$target_pid"
t0=$(now)
listed=$("$GRIST" ls "$bucket" --endpoint "$endpoint" | grep -c "$prefix" || true)
[ "$listed" = "$count" ] || die "listing returned $listed names, expected $count"
row list "$(since "$t0")" "$listed names"

# --- random GETs through the proxy -----------------------------------------------------------
get_pass() { # json
  "$BENCH" --endpoint "$endpoint" --mode proxy --bucket "$bucket" --objects "$count" \
    --size "$size" --prefix "$prefix" --order random --workers 32 --duration "${get_s}s" \
    --json --interval 0 >"$1" || die "GETs failed (see $1)"
}
reset_peak "$proxy_pid" "$target_pid"
t0=$(now)
get_pass "$workdir/get.json"
row get "$(since "$t0")" "$(bench_summary "$workdir/get.json" GET)"

# --- listing and GETs at once ----------------------------------------------------------------
reset_peak "$proxy_pid" "$target_pid"
t0=$(now)
get_pass "$workdir/get2.json" &
gp=$!
bg_pids=$gp
listed=$("$GRIST" ls "$bucket" --endpoint "$endpoint" | grep -c "$prefix" || true)
wait "$gp" || die "GETs failed during the listing"
bg_pids=""
[ "$listed" = "$count" ] || die "listing returned $listed names, expected $count"
row list+get "$(since "$t0")" "$listed names; $(bench_summary "$workdir/get2.json" GET)"

# --- rebalance: a second target joins, the first sends it its share --------------------------
if [ "$rebalance" = 1 ]; then
  # A fresh process, so what the GET phases left in the allocator does not hide the walk's own.
  stop_pid "$target_pid"
  start_target
  wait_listing
  sleep 2
  rss_before=$(mib "$(kib "$target_pid" VmRSS)")
  reset_peak "$proxy_pid" "$target_pid"
  t0=$(now)
  "$GRISTD" target --listen "127.0.0.1:$((port + 2))" --state-dir "$workdir/target2" \
    --join "$endpoint" --mountpath "$workdir/target2/mp0" >>"$workdir/target2.log" 2>&1 &
  target2_pid=$!
  wait_health "$target2_url" "$target2_pid" target2
  moved=$(python3 - "$endpoint" <<'EOF2'
import json, sys, time, urllib.request
ep = sys.argv[1]
def get(path):
    with urllib.request.urlopen(ep + path, timeout=30) as r:
        return json.load(r)
deadline = time.time() + 3600
while time.time() < deadline:
    smap = get("/v1/daemon?what=smap")
    if len(smap.get("tmap", {})) == 2:
        try:
            job = get(f"/v1/jobs/rb{smap['version']}")
        except Exception:
            job = None
        if job and job["state"] == "finished" and len(job.get("targets", [])) == 2:
            print(f"{job['objects'] - job['skipped']} objects moved, {job['errors']} errors")
            sys.exit(0)
    time.sleep(0.5)
sys.exit("the rebalance did not finish")
EOF2
) || die "rebalance failed"
  row rebalance "$(since "$t0")" "$moved; target VmRSS at the start $rss_before MiB"
  listed=$("$GRIST" ls "$bucket" --endpoint "$endpoint" | grep -c "$prefix" || true)
  [ "$listed" = "$count" ] || die "after the rebalance the listing returned $listed names, expected $count"
fi

index_mib=$(du -cm "$workdir"/target/mp*/index.redb | tail -1 | cut -f1)
data_mib=$(du -sm "$workdir/target" | cut -f1)
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

report() {
  echo "Binaries: $bindir. One proxy + one target (2 mountpaths), $count objects of $size B in $bucket."
  echo "Index files: $index_mib MiB; the target's state directory: $data_mib MiB on disk."
  echo "Load average before: $load_start; after: $load_end. Peak reset per phase: $peak_reset."
  echo
  echo "| phase | seconds | what | proxy VmHWM MiB | proxy VmRSS MiB | target VmHWM MiB | target VmRSS MiB | target RssAnon MiB | target threads |"
  echo "|---|---|---|---|---|---|---|---|---|"
  printf '%s' "$rows"
}
report
[ -z "$out" ] || report >"$out"
