#!/usr/bin/env bash
# Profiles warm GETs: a playground of one proxy and N targets (release binaries), a fixed object
# set, a warm-up, then a measured run that reports ops/s and the targets', the proxy's and the
# client's CPU per GET; with --perf, `perf record -g` of one node during the run (the first
# target, or the proxy with --perf-node proxy; report with `perf report -i <dir>/perf.data`).
# --mode picks the path: direct (HRW in the client), proxy (the 307), s3 (S3 through the proxy),
# s3-target (S3 on the first target's own S3 port, `playground --target-s3-port`).
# Environment such as GRISTD_OPEN_FILES=0 reaches the nodes, which is how A/B runs of one
# binary are made.
# Usage: benches/profile_get.sh [--size 16KiB] [--objects 3000] [--workers 32] [--duration 10]
#                               [--targets 1] [--mode direct|proxy|s3|s3-target] [--perf]
#                               [--perf-node target|proxy] [--bin-dir DIR] [--keep]
set -euo pipefail
cd "$(dirname "$0")/.."
size=16KiB objects=3000 workers=32 duration=10 perf=0 keep=0 bin=build/release targets=1
mode=direct perf_node=target
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size=$2; shift 2 ;;
    --objects) objects=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --perf) perf=1; shift ;;
    --mode) mode=$2; shift 2 ;;
    --perf-node) perf_node=$2; shift 2 ;;
    --bin-dir) bin=$2; shift 2 ;;
    --targets) targets=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "unknown option $1" >&2; exit 1 ;;
  esac
done
[ -x "$bin/gristd" ] && [ -x "$bin/grist-bench" ] || cargo build --release --bin gristd --bin grist-bench
dir=$(mktemp -d /tmp/grist-profile.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin/gristd" playground --data-dir "$dir/data" --port "$port" --targets "$targets" --proxies 1 \
  --target-s3-port $((port + targets + 1)) >"$dir/playground.log" 2>&1 &
play=$!
cleanup() {
  kill "$play" 2>/dev/null || true
  wait "$play" 2>/dev/null || true
  [ "$keep" = 1 ] || rm -rf "$dir"
}
trap cleanup EXIT
ep=http://127.0.0.1:$port
for _ in $(seq 1 150); do curl -sf "$ep/v1/health" >/dev/null 2>&1 && break; sleep 0.2; done
sleep 1
bench_at() { local e=$1; shift; "$bin/grist-bench" --endpoint "$e" --bucket prof --objects "$objects" --size "$size" --prefix g/ --interval 0 "$@"; }
bench() { bench_at "$ep" "$@"; }
# The measured runs' path (s3-target: grist-bench's S3 mode on the first target's S3 port).
measured=("$ep" --mode "$mode")
[ "$mode" = s3-target ] && measured=("http://127.0.0.1:$((port + targets + 1))" --mode s3)
curl -sf -X POST "$ep/v1/buckets/prof" -H 'Content-Type: application/json' -d '{"action":"create-bck"}' >/dev/null
bench --mode direct --pct-put 100 --count "$objects" --workers 8 >/dev/null
target=$(pgrep -f "gristd target .*$dir" | head -1)
all_targets=$(pgrep -f "gristd target .*$dir" | tr '\n' ' ')
proxy=$(pgrep -f "gristd proxy .*$dir" | head -1)
[ "$perf_node" = proxy ] && recorded=$proxy || recorded=$target
bench_at "${measured[@]}" --workers "$workers" --duration 3s >/dev/null
# CPU (clock ticks) of the given processes.
cpu() { local sum=0 p; for p in "$@"; do sum=$((sum + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $sum; }
t0=$(cpu $all_targets) p0=$(cpu "$proxy")
if [ "$perf" = 1 ]; then
  perf record -e cpu-clock -F 999 --call-graph dwarf,32768 -p "$recorded" -o "$dir/perf.data" -- sleep $((duration - 2)) >/dev/null 2>&1 &
  rec=$!
fi
bench_at "${measured[@]}" --workers "$workers" --duration "${duration}s" --json >"$dir/result.json"
t1=$(cpu $all_targets) p1=$(cpu "$proxy")
[ "$perf" = 1 ] && wait "$rec"
ticks=$(getconf CLK_TCK)
python3 - "$dir/result.json" "$t0" "$t1" "$ticks" "$p0" "$p1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cpu = (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4])
pcpu = (int(sys.argv[6]) - int(sys.argv[5])) / int(sys.argv[4])
print(f"{r['ops_per_s']:.0f} ops/s, {r['mib_per_s']:.0f} MiB/s, p50 {r['lat_us']['p50']} us, "
      f"target CPU {cpu * 1e6 / r['ops']:.1f} us/GET, proxy CPU {pcpu * 1e6 / r['ops']:.1f} us/GET, client CPU {r['client_cpu_s'] * 1e6 / r['ops']:.1f} us/GET")
PY
[ "$perf" = 1 ] && { keep=1; echo "perf data: $dir/perf.data"; }
exit 0
