#!/usr/bin/env bash
# A/B of durable 16 KiB PUTs (new objects, native API straight to the target) on a one-proxy,
# one-target playground: two builds side by side, which runs first alternating per round.
# Usage: benches/put_ab.sh BEFORE_BIN_DIR AFTER_BIN_DIR [ROUNDS]   (each dir holds gristd and
# grist-bench; prints ops/s and latency per run)
set -u
before=$1 after=$2 rounds=${3:-3}
run() {
  local bin=$1 dir port play
  dir=$(mktemp -d /tmp/put-ab.XXXXXX)
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$bin/gristd" playground --data-dir "$dir/data" --port "$port" --targets 1 --proxies 1 >"$dir/log" 2>&1 &
  play=$!
  for _ in $(seq 1 150); do curl -sf "http://127.0.0.1:$port/v1/health" >/dev/null 2>&1 && break; sleep 0.2; done
  sleep 1
  curl -sf -X POST "http://127.0.0.1:$port/v1/buckets/ab" -H 'Content-Type: application/json' -d '{"action":"create-bck"}' >/dev/null
  "$bin/grist-bench" --endpoint "http://127.0.0.1:$port" --bucket ab --objects 20000 --size 16KiB --prefix p/ --interval 0 \
     --mode direct --pct-put 100 --workers 16 --duration 10s --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin); l=r["lat_us"]; print("%.0f ops/s, p50 %s us, p99 %s us" % (r["ops_per_s"], l["p50"], l.get("p99")))'
  kill $play; wait $play 2>/dev/null
  rm -rf "$dir"
}
for round in $(seq 1 "$rounds"); do
  order="before after"
  [ $((round % 2)) = 0 ] && order="after before"
  for side in $order; do
    if [ "$side" = before ]; then bin=$before; else bin=$after; fi
    echo "round $round $side: $(run "$bin")"
  done
done
