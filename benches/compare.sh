#!/usr/bin/env bash
# Side-by-side benchmark: Gristmill vs baselines on this machine, in the same run.
#
# Starts a `gristd playground` (1 proxy + 3 targets, or --targets N) and an nginx (its own config, 127.0.0.1
# only, sendfile on) on free ports, writes the SAME object files for nginx that it PUTs into
# Gristmill, and drives both with the same load generator (grist-bench; http mode for nginx).
# Rows: warm GET 1 MiB and 16 KiB (through the proxy's 307 and direct by HRW) vs nginx; PUT
# 1 MiB (durable) vs fio sequential write with fsync of the same size; wrk cross-checks when
# wrk is installed. Prints one table of ratios (Gristmill / baseline) with the command line of
# every row, and the peak RSS (VmHWM) of each gristd node. Stops everything it started by pid.
#
# Usage: benches/compare.sh [--smoke] [--rounds N] [--duration SECONDS] [--dir DIR] [--keep]
#                           [--out FILE] [--bin-dir DIR]
#   --smoke      tiny run (few objects, ~2 s per row, debug binaries from build/debug when
#                present): checks that the pipeline works and prints the table.
#   --rounds N   repeat every GET row N times, alternating systems; the table shows medians
#                (default 3; 1 with --smoke).
#   --duration S length of each timed row in seconds (default 15; 2 with --smoke).
#   --dir DIR    work directory, must be empty; kept afterwards (default: a new temp dir,
#                removed at exit unless --keep or a failure).
#   --keep       keep the work directory (logs, raw JSON results).
#   --out FILE   also write the report (markdown) to FILE.
#   --bin-dir D  use gristd and grist-bench from D instead of building them.
#   --targets N  targets in the playground (default 3). With 1, the server side is what one
#                host of a deployment runs (a proxy and its target) against one nginx.
# Needs: cargo (unless --bin-dir), python3, curl; installs nginx (and fio, wrk unless --smoke)
# with apt-get when missing (as root, or through sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

targets=3
smoke=0 rounds="" duration="" workdir="" keep=0 out="" bindir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --rounds) rounds=$2; shift ;;
    --duration) duration=$2; shift ;;
    --dir) workdir=$2; shift ;;
    --keep) keep=1 ;;
    --out) out=$2; shift ;;
    --bin-dir) bindir=$2; shift ;;
    --targets) targets=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare.sh: unknown option $1 (see --help)" >&2; exit 1 ;;
  esac
  shift
done

# Workload parameters. Same for Gristmill and the baselines in every row.
if [ "$smoke" = 1 ]; then
  rounds=${rounds:-1} dur_s=${duration:-2}
  big_objects=16 small_objects=64 put_job_mib=16
else
  rounds=${rounds:-3} dur_s=${duration:-15}
  big_objects=1000 small_objects=10000 put_job_mib=1024
fi
big_workers=16 small_workers=32 put_workers=8
case "$dur_s" in '' | *[!0-9]*) echo "compare.sh: --duration takes whole seconds" >&2; exit 1 ;; esac
duration=${dur_s}s

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'compare.sh: %s\n' "$*" >&2; exit 1; }

# --- tools ---------------------------------------------------------------------------------
apt_updated=0
apt_install() { # packages...
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || return 1
    sudo="sudo -n"
  fi
  command -v apt-get >/dev/null || return 1
  export DEBIAN_FRONTEND=noninteractive
  if ! $sudo apt-get install -y -q "$@" >/dev/null 2>&1; then
    [ "$apt_updated" = 1 ] && return 1
    $sudo apt-get update -q >/dev/null 2>&1 || return 1
    apt_updated=1
    $sudo apt-get install -y -q "$@" >/dev/null 2>&1 || return 1
  fi
}
find_tool() { # name -> path or empty
  command -v "$1" 2>/dev/null || { [ -x "/usr/sbin/$1" ] && echo "/usr/sbin/$1"; } || true
}
need() { # name [package]
  local p
  p=$(find_tool "$1")
  if [ -z "$p" ]; then
    log "installing ${2:-$1}"
    apt_install "${2:-$1}" || true
    p=$(find_tool "$1")
  fi
  echo "$p"
}
for t in python3 curl; do
  command -v $t >/dev/null || die "$t is required"
done
NGINX=$(need nginx)
[ -n "$NGINX" ] || die "nginx is not installed and apt-get could not install it"
if [ "$smoke" = 1 ]; then
  FIO=$(find_tool fio) WRK=""
else
  FIO=$(need fio) WRK=$(need wrk)
fi

# --- binaries ------------------------------------------------------------------------------
if [ -n "$bindir" ]; then
  bindir=$(cd "$bindir" && pwd)
elif [ "$smoke" = 1 ]; then
  bindir=$root/build/debug
  if [ ! -x "$bindir/gristd" ] || [ ! -x "$bindir/grist-bench" ]; then
    log "building debug binaries"
    cargo build -q --bin gristd --bin grist-bench
  fi
else
  log "building release binaries (cargo build --release --bin gristd --bin grist-bench)"
  cargo build --release --bin gristd --bin grist-bench
  bindir=$root/build/release
fi
GRISTD=$bindir/gristd
BENCH=$bindir/grist-bench
if [ ! -x "$GRISTD" ] || [ ! -x "$BENCH" ]; then die "no gristd/grist-bench in $bindir"; fi

load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# --- work dir, ports, cleanup --------------------------------------------------------------
if [ -z "$workdir" ]; then
  workdir=$(mktemp -d "${TMPDIR:-/tmp}/grist-compare.XXXXXX")
else
  keep=1
  mkdir -p "$workdir"
  workdir=$(cd "$workdir" && pwd)
  [ -z "$(ls -A "$workdir")" ] || die "--dir $workdir is not empty"
fi
chmod 755 "$workdir"
mkdir -p "$workdir/res" "$workdir/nginx/tmp" "$workdir/www" "$workdir/fio"

pg_pid="" nginx_pid=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$nginx_pid" ] && kill -0 "$nginx_pid" 2>/dev/null; then
    kill -TERM "$nginx_pid" 2>/dev/null || true
  fi
  if [ -n "$pg_pid" ] && kill -0 "$pg_pid" 2>/dev/null; then
    kill -TERM "$pg_pid" 2>/dev/null || true # the playground stops its nodes
  fi
  for p in $nginx_pid $pg_pid; do
    for _ in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  if [ "$keep" = 1 ] || [ "$rc" != 0 ]; then
    echo "work directory kept: $workdir" >&2
  else
    rm -rf "$workdir"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# First of 16 consecutive free ports on 127.0.0.1 (proxy, 3 targets, nginx, nginx reverse
# proxy; from +8 the targets' own S3 ports).
port=$(python3 - <<'EOF'
import random, socket, sys
for _ in range(500):
    base = random.randint(20000, 59990)
    socks = []
    try:
        for p in range(base, base + 16):
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
endpoint=http://127.0.0.1:$port
nginx_port=$((port + 4))
nginx_url=http://127.0.0.1:$nginx_port
# nginx as a reverse proxy in front of the nginx above: the one-hop baseline for the S3 rows
# (Gristmill's S3 API streams every request through the proxy to the owning target).
nginx_hop_port=$((port + 5))
nginx_hop_url=http://127.0.0.1:$nginx_hop_port
# Target i serves S3 reads itself on port + 8 + i (`playground --target-s3-port`); the rows
# read through the first one (with several targets, it forwards reads of others' objects once).
target_s3_url=http://127.0.0.1:$((port + 8))

# --- start Gristmill -----------------------------------------------------------------------
log "starting gristd playground on $endpoint (data in $workdir/grist)"
"$GRISTD" playground --data-dir "$workdir/grist" --port "$port" --targets "$targets" --target-s3-port $((port + 8)) >"$workdir/playground.out" 2>&1 &
pg_pid=$!
for _ in $(seq 600); do
  grep -q '^endpoint:' "$workdir/playground.out" 2>/dev/null && break
  kill -0 "$pg_pid" 2>/dev/null || { cat "$workdir/playground.out" >&2; die "playground exited"; }
  sleep 0.1
done
grep -q '^endpoint:' "$workdir/playground.out" || die "playground did not come up in 60 s"

children_of() { # pid -> pids of its child processes
  local st p
  for st in /proc/[0-9]*/status; do
    p=${st#/proc/}
    p=${p%/status}
    [ "$(awk '/^PPid:/ {print $2}' "$st" 2>/dev/null)" = "$1" ] && echo "$p"
  done
  return 0
}
cpu_ticks() { # pids... -> user+system clock ticks used so far, summed
  local p t=0 v
  for p in "$@"; do
    v=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)
    t=$((t + ${v:-0}))
  done
  echo "$t"
}
grist_pids=$(children_of "$pg_pid" | tr '\n' ' ')

# --- start nginx ---------------------------------------------------------------------------
user_line=""
if [ "$(id -u)" = 0 ]; then
  user_line="user nobody $(id -gn nobody 2>/dev/null || echo nogroup);"
fi
cat >"$workdir/nginx/nginx.conf" <<EOF
$user_line
worker_processes 2;
pid $workdir/nginx/nginx.pid;
error_log $workdir/nginx/error.log warn;
events { worker_connections 4096; }
http {
  default_type application/octet-stream;
  access_log off;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_timeout 75s;
  keepalive_requests 1000000;
  client_body_temp_path $workdir/nginx/tmp/body;
  proxy_temp_path $workdir/nginx/tmp/proxy;
  fastcgi_temp_path $workdir/nginx/tmp/fastcgi;
  uwsgi_temp_path $workdir/nginx/tmp/uwsgi;
  scgi_temp_path $workdir/nginx/tmp/scgi;
  server {
    listen 127.0.0.1:$nginx_port;
    root $workdir/www;
    location / { }
  }
  upstream origin {
    server 127.0.0.1:$nginx_port;
    keepalive 64;
  }
  server {
    listen 127.0.0.1:$nginx_hop_port;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
EOF
log "starting nginx on $nginx_url (root $workdir/www)"
"$NGINX" -p "$workdir/nginx" -e "$workdir/nginx/error.log" -c "$workdir/nginx/nginx.conf" \
  -g 'daemon off;' &
nginx_pid=$!
for _ in $(seq 100); do
  curl -s -o /dev/null "$nginx_url/" && break
  kill -0 "$nginx_pid" 2>/dev/null || { cat "$workdir/nginx/error.log" >&2; die "nginx exited"; }
  sleep 0.1
done
nginx_pids="$nginx_pid $(children_of "$nginx_pid" | tr '\n' ' ')"

# --- helpers -------------------------------------------------------------------------------
declare -A CMD # row key -> command line
bench() { # key args... : one grist-bench run, JSON lines in res/<key>.json, server CPU in .cpu
  local key=$1 servers before
  shift
  CMD[$key]="grist-bench $*"
  case "$key" in *nginx*) servers=$nginx_pids ;; *) servers=$grist_pids ;; esac
  # shellcheck disable=SC2086 # word splitting of the pid list is intended
  before=$(cpu_ticks $servers)
  "$BENCH" "$@" --json --interval 0 >"$workdir/res/$key.json" 2>"$workdir/res/$key.err" || {
    cat "$workdir/res/$key.err" >&2
    die "grist-bench failed: $*"
  }
  # shellcheck disable=SC2086
  echo $(($(cpu_ticks $servers) - before)) >"$workdir/res/$key.cpu"
}
metric() { # field op key-glob : median of field over the final lines of res/<glob>.json
  python3 - "$workdir/res" "$1" "$2" "$3" <<'EOF'
import glob, json, statistics, sys
res, field, op, key = sys.argv[1:]
vals = []
for path in sorted(glob.glob(f"{res}/{key}.json")):
    for line in open(path):
        d = json.loads(line)
        if d.get("phase") == "final" and d.get("op") == op:
            for part in field.split("."):
                d = d[part]
            vals.append(d)
print(statistics.median(vals) if vals else 0)
EOF
}
cpu_per_op() { # op key-glob -> "server-µs/op client-µs/op machine-busy-%" (medians over rounds)
  python3 - "$workdir/res" "$1" "$2" "$(nproc)" <<'EOF'
import glob, json, statistics, sys
res, op, key, ncpu = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
srv, cli, busy = [], [], []
for path in sorted(glob.glob(f"{res}/{key}.json")):
    ticks = int(open(path[:-5] + ".cpu").read().strip() or 0)
    for line in open(path):
        d = json.loads(line)
        if d.get("phase") == "final" and d.get("op") == op and d["ops"] > 0:
            server_s = ticks / 100.0
            client_s = d.get("client_cpu_s", 0.0)
            srv.append(server_s * 1e6 / d["ops"])
            cli.append(client_s * 1e6 / d["ops"])
            busy.append(100.0 * (server_s + client_s) / (d["elapsed_s"] * ncpu))
med = lambda v: statistics.median(v) if v else 0
print(f"{med(srv):.0f} {med(cli):.0f} {med(busy):.0f}")
EOF
}

big=(--objects "$big_objects" --size 1MiB --prefix get-1m/)
small=(--objects "$small_objects" --size 16KiB --prefix get-16k/)

# --- populate ------------------------------------------------------------------------------
log "populating: $big_objects x 1 MiB and $small_objects x 16 KiB, in Gristmill and for nginx"
bench populate-1m --mode direct --endpoint "$endpoint" --bucket bench --create-bucket \
  "${big[@]}" --workers "$put_workers" --pct-put 100 --epochs 1 --order seq
bench populate-16k --mode direct --endpoint "$endpoint" --bucket bench \
  "${small[@]}" --workers "$put_workers" --pct-put 100 --epochs 1 --order seq
# One tar shard holding a 16 KiB member (`--archpath` rows): shard/00000000.
python3 - "$workdir/shard.tar" <<'EOF'
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w") as tar:
    for name, size in (("before.bin", 1000), ("member.bin", 16384), ("after.bin", 5000)):
        info = tarfile.TarInfo(name)
        info.size = size
        tar.addfile(info, io.BytesIO(bytes((i * 7) % 251 for i in range(size))))
EOF
curl -sf -L -X PUT --data-binary @"$workdir/shard.tar" "$endpoint/v1/objects/bench/shard/00000000" >/dev/null \
  || die "PUT of the tar shard failed"
"$BENCH" --write-files "$workdir/www" "${big[@]}" 2>/dev/null
"$BENCH" --write-files "$workdir/www" "${small[@]}" 2>/dev/null
sync

# Warm-up: one verified pass over every set through every path (also proves the bytes match).
log "warm-up: one verified pass per system"
for s in big small; do
  declare -n objs=$s
  bench "warm-$s-nginx" --mode http --endpoint "$nginx_url" "${objs[@]}" --workers 8 --epochs 1 --verify
  bench "warm-$s-direct" --mode direct --endpoint "$endpoint" --bucket bench "${objs[@]}" --workers 8 --epochs 1 --verify
  bench "warm-$s-proxy" --mode proxy --endpoint "$endpoint" --bucket bench "${objs[@]}" --workers 8 --epochs 1 --verify
  bench "warm-$s-s3" --mode s3 --endpoint "$endpoint" --bucket bench "${objs[@]}" --workers 8 --epochs 1 --verify
  bench "warm-$s-nginxhop" --mode http --endpoint "$nginx_hop_url" "${objs[@]}" --workers 8 --epochs 1 --verify
  unset -n objs
done

# --- GET rows ------------------------------------------------------------------------------
# One round's rows, one per line ("key args..."; no argument has spaces). Odd rounds run them in
# this order, even rounds in reverse: each baseline runs first in half the rounds, so neither
# side keeps the warmer (or the more contended) slot.
get_rows() { # round
  local r=$1
  echo "get1m-nginx.r$r --mode http --endpoint $nginx_url ${big[*]} --workers $big_workers --duration $duration"
  echo "get1m-proxy.r$r --mode proxy --endpoint $endpoint --bucket bench ${big[*]} --workers $big_workers --duration $duration"
  echo "get1m-direct.r$r --mode direct --endpoint $endpoint --bucket bench ${big[*]} --workers $big_workers --duration $duration"
  echo "get16k-nginx.r$r --mode http --endpoint $nginx_url ${small[*]} --workers $small_workers --duration $duration"
  echo "get16k-proxy.r$r --mode proxy --endpoint $endpoint --bucket bench ${small[*]} --workers $small_workers --duration $duration"
  echo "get16k-direct.r$r --mode direct --endpoint $endpoint --bucket bench ${small[*]} --workers $small_workers --duration $duration"
  # S3 GetObject through the proxy (path-style, SigV4-signed with the key a cluster with auth
  # off accepts; the signature is checked) vs nginx proxy -> nginx.
  echo "s3get1m-nginxhop.r$r --mode http --endpoint $nginx_hop_url ${big[*]} --workers $big_workers --duration $duration"
  echo "s3get1m-grist.r$r --mode s3 --endpoint $endpoint --bucket bench ${big[*]} --workers $big_workers --duration $duration"
  echo "s3get16k-nginxhop.r$r --mode http --endpoint $nginx_hop_url ${small[*]} --workers $small_workers --duration $duration"
  echo "s3get16k-grist.r$r --mode s3 --endpoint $endpoint --bucket bench ${small[*]} --workers $small_workers --duration $duration"
  # The same S3 GETs on a target's own S3 port (no proxy hop) vs nginx serving the files.
  echo "s3get1m-target.r$r --mode s3 --endpoint $target_s3_url --bucket bench ${big[*]} --workers $big_workers --duration $duration"
  echo "s3get16k-target.r$r --mode s3 --endpoint $target_s3_url --bucket bench ${small[*]} --workers $small_workers --duration $duration"
  # get-batch (32 x 16 KiB per request, one streamed archive) and archive-member reads (a
  # 16 KiB member of a tar shard), compared by bytes/s with plain 16 KiB GETs direct.
  echo "batch16k-grist.r$r --mode proxy --endpoint $endpoint --bucket bench ${small[*]} --batch-size 32 --workers 4 --duration $duration"
  echo "arch16k-grist.r$r --mode direct --endpoint $endpoint --bucket bench --objects 1 --size 16KiB --prefix shard/ --archpath member.bin --workers $small_workers --duration $duration"
}
for r in $(seq "$rounds"); do
  log "GET round $r/$rounds ($duration per row)"
  mapfile -t rows < <(get_rows "$r")
  if [ $((r % 2)) = 0 ]; then
    mapfile -t rows < <(printf '%s\n' "${rows[@]}" | tac)
  fi
  for row in "${rows[@]}"; do
    # shellcheck disable=SC2086 # a row is split into its words on purpose
    bench $row
  done
done

# --- PUT rows ------------------------------------------------------------------------------
put=(--objects "$big_objects" --size 1MiB --prefix put-1m/ --pct-put 100 --workers "$put_workers" --duration "$duration")
log "PUT 1 MiB ($duration per row)"
bench put1m-direct --mode direct --endpoint "$endpoint" --bucket bench "${put[@]}"
bench put1m-proxy --mode proxy --endpoint "$endpoint" --bucket bench "${put[@]}"
bench put1m-s3 --mode s3 --endpoint "$endpoint" --bucket bench "${put[@]}"
fio_mibs="" fio_cmd=""
if [ -n "$FIO" ]; then
  fio_cmd="fio --name=seqwrite-fsync --directory=$workdir/fio --rw=write --bs=1M --size=${put_job_mib}M --numjobs=$put_workers --fsync=1 --ioengine=psync --runtime=$dur_s --group_reporting --output-format=json"
  log "fio sequential write, 1 MiB blocks, fsync after each"
  $fio_cmd >"$workdir/res/fio.json" 2>"$workdir/res/fio.err" || { cat "$workdir/res/fio.err" >&2; die "fio failed"; }
  fio_mibs=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(round(d["jobs"][0]["write"]["bw_bytes"]/1048576, 1))' "$workdir/res/fio.json")
  rm -rf "$workdir/fio"
fi

# --- wrk cross-check (one hot object, no redirect: the target URL the proxy points to) ----
wrk_rows=() wrk_cpu=()
if [ -n "$WRK" ]; then
  log "wrk cross-check ($duration per row)"
  wrk_run() { # key connections url servers... -> "req/s MiB/s server-µs/req"
    local key=$1 conns=$2 url=$3 before
    shift 3
    before=$(cpu_ticks "$@")
    "$WRK" -t2 -c"$conns" -d"$duration" --latency "$url" >"$workdir/res/$key.wrk" 2>&1 || die "wrk failed on $url"
    python3 - "$workdir/res/$key.wrk" "$(($(cpu_ticks "$@") - before))" <<'EOF'
import re, sys
t = open(sys.argv[1]).read()
ticks = int(sys.argv[2])
rps = float(re.search(r"Requests/sec:\s*([\d.]+)", t).group(1))
total = int(re.search(r"(\d+) requests in", t).group(1))
m = re.search(r"Transfer/sec:\s*([\d.]+)([KMG]?B)", t)
mib = float(m.group(1)) * {"B": 1/1048576, "KB": 1/1024, "MB": 1, "GB": 1024}[m.group(2)]
errs = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
if errs:
    sys.exit("wrk saw non-2xx responses")
print(rps, round(mib, 1), round(ticks / 100.0 * 1e6 / max(total, 1)))
EOF
  }
  for s in 1m 16k; do
    name=get-$s/00000000
    [ $s = 1m ] && c=$big_workers || c=$small_workers
    target_url=$(curl -s -o /dev/null -w '%{redirect_url}' "$endpoint/v1/objects/bench/$name")
    # shellcheck disable=SC2086 # word splitting of the pid lists is intended
    read -r g_rps g_mib g_cpu < <(wrk_run "wrk$s-direct" "$c" "$target_url" $grist_pids)
    # shellcheck disable=SC2086
    read -r n_rps n_mib n_cpu < <(wrk_run "wrk$s-nginx" "$c" "$nginx_url/$name" $nginx_pids)
    wrk_cpu+=("wrk$s-direct Gristmill $g_cpu" "wrk$s-nginx nginx $n_cpu")
    CMD[wrk$s-direct]="wrk -t2 -c$c -d$duration --latency $target_url"
    CMD[wrk$s-nginx]="wrk -t2 -c$c -d$duration --latency $nginx_url/$name"
    wrk_rows+=("$s $g_rps $g_mib $n_rps $n_mib")
  done
fi

# --- peak RSS of every node (VmHWM), before stopping anything -----------------------------
rss_lines=()
for status in /proc/[0-9]*/status; do
  pid=${status#/proc/}
  pid=${pid%/status}
  ppid=$(awk '/^PPid:/ {print $2}' "$status" 2>/dev/null || true)
  [ "$ppid" = "$pg_pid" ] || continue
  args=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
  role=$(echo "$args" | awk '{print $2}')
  listen=$(echo "$args" | sed -n 's/.*--listen \([^ ]*\).*/\1/p')
  hwm=$(awk '/^VmHWM:/ {print $2}' "$status" 2>/dev/null || true)
  rss_lines+=("$role $listen $pid ${hwm:-0}")
done
pg_hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pg_pid/status" 2>/dev/null || echo 0)
ngx_hwm=0
for status in /proc/[0-9]*/status; do
  pid=${status#/proc/}
  pid=${pid%/status}
  ppid=$(awk '/^PPid:/ {print $2}' "$status" 2>/dev/null || true)
  if [ "$pid" = "$nginx_pid" ] || [ "$ppid" = "$nginx_pid" ]; then
    h=$(awk '/^VmHWM:/ {print $2}' "$status" 2>/dev/null || echo 0)
    [ "${h:-0}" -gt "$ngx_hwm" ] && ngx_hwm=$h
  fi
done

# --- report --------------------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
met() { awk -v r="$1" -v g="$2" 'BEGIN { if (r == "n/a") print "n/a"; else if (r + 0 >= g + 0) print "yes"; else print "no" }'; }
fmt() { awk -v v="$1" 'BEGIN { printf "%.0f", v }'; }

report() {
  echo "## Gristmill vs baselines ($( [ "$smoke" = 1 ] && echo smoke || echo full ) run)"
  echo
  if [ "$smoke" = 1 ]; then
    echo "Smoke run: checks that the pipeline works. Tiny sets, 2 s rows and (usually) debug"
    echo "binaries: these numbers are NOT benchmark results; run benches/compare.sh for those."
    echo
  fi
  echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(awk '/^MemTotal:/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) RAM, kernel $(uname -r);" \
    "data on $(df -T "$workdir" | awk 'NR==2 {print $2}'); load generator, servers and baselines share the machine."
  echo "Binaries: $bindir. Playground: 1 proxy + $targets target(s). GET rows: median of $rounds round(s) of $duration each, warm page cache."
  echo "Load average (1/5/15 min) before the run: $load_start; after: $(cut -d' ' -f1-3 /proc/loadavg)" \
    "(anything above ~0 before the run is other work competing for the same CPUs)."
  echo
  echo "| # | workload | metric | Gristmill | baseline | ratio | goal | met |"
  echo "|---|---|---|---|---|---|---|---|"
  local n=0 g b r
  row() { # label metric-name field op gkey bkey baseline-name goal
    n=$((n + 1))
    g=$(metric "$3" "$4" "$5")
    b=$(metric "$3" "$4" "$6")
    r=$(ratio "$g" "$b")
    echo "| $n | $1 | $2 | $(fmt "$g") | $7 $(fmt "$b") | $r | ${8:+≥ $8} | $( [ -n "$8" ] && met "$r" "$8" || echo "report") |"
    ROWCMDS+=("$n. Gristmill: \`${CMD[${5%.r*}.r1]:-${CMD[$5]}}\`; baseline: \`${CMD[${6%.r*}.r1]:-${CMD[$6]}}\`")
  }
  ROWCMDS=()
  # Goals: issue 30 (small objects at nginx speed); the 1 MiB rows must not regress.
  row "GET 1 MiB, native via proxy 307" "MiB/s" mib_per_s GET 'get1m-proxy.r*' 'get1m-nginx.r*' nginx 0.9
  row "GET 1 MiB, native direct (HRW)" "MiB/s" mib_per_s GET 'get1m-direct.r*' 'get1m-nginx.r*' nginx 0.9
  row "GET 16 KiB, native via proxy 307" "ops/s" ops_per_s GET 'get16k-proxy.r*' 'get16k-nginx.r*' nginx 0.5
  row "GET 16 KiB, native direct (HRW)" "ops/s" ops_per_s GET 'get16k-direct.r*' 'get16k-nginx.r*' nginx 0.9
  row "GET 1 MiB, S3 API through the proxy" "MiB/s" mib_per_s GET 's3get1m-grist.r*' 's3get1m-nginxhop.r*' "nginx→nginx" 0.9
  row "GET 16 KiB, S3 API through the proxy" "ops/s" ops_per_s GET 's3get16k-grist.r*' 's3get16k-nginxhop.r*' "nginx→nginx" 1.0
  row "GET 1 MiB, S3 API on a target's S3 port" "MiB/s" mib_per_s GET 's3get1m-target.r*' 'get1m-nginx.r*' nginx 0.9
  row "GET 16 KiB, S3 API on a target's S3 port" "ops/s" ops_per_s GET 's3get16k-target.r*' 'get16k-nginx.r*' nginx 0.9
  # Server CPU per GET, nginx's over Gristmill's (≥ 1/1.2: Gristmill at most 1.2x nginx's).
  local gcpu ncpu _c _b
  read -r gcpu _c _b < <(cpu_per_op GET 'get16k-direct.r*')
  read -r ncpu _c _b < <(cpu_per_op GET 'get16k-nginx.r*')
  n=$((n + 1))
  r=$(ratio "$ncpu" "$gcpu")
  echo "| $n | GET 16 KiB direct: server CPU per GET (inverse ratio: nginx µs / Gristmill µs) | µs/op | $gcpu | nginx $ncpu | $r | ≥ 0.83 | $(met "$r" 0.83) |"
  ROWCMDS+=("$n. the rows of GET 16 KiB direct and nginx above; server CPU from /proc/<pid>/stat of every gristd node / every nginx process")
  row "get-batch 32 x 16 KiB per request, via proxy" "MiB/s" mib_per_s GET 'batch16k-grist.r*' 'get16k-direct.r*' "native 16 KiB GETs direct" ""
  row "archive member 16 KiB (--archpath), direct" "MiB/s" mib_per_s GET 'arch16k-grist.r*' 'get16k-direct.r*' "native 16 KiB GETs direct" ""
  local put_direct put_proxy put_s3
  put_s3=$(metric mib_per_s PUT put1m-s3)
  put_direct=$(metric mib_per_s PUT put1m-direct)
  put_proxy=$(metric mib_per_s PUT put1m-proxy)
  if [ -n "$fio_mibs" ]; then
    n=$((n + 1))
    echo "| $n | PUT 1 MiB durable, direct | MiB/s | $(fmt "$put_direct") | fio $(fmt "$fio_mibs") | $(ratio "$put_direct" "$fio_mibs") | | report |"
    ROWCMDS+=("$n. Gristmill: \`${CMD[put1m-direct]}\`; baseline: \`$fio_cmd\`")
    n=$((n + 1))
    echo "| $n | PUT 1 MiB durable, via proxy 307 | MiB/s | $(fmt "$put_proxy") | fio $(fmt "$fio_mibs") | $(ratio "$put_proxy" "$fio_mibs") | | report |"
    ROWCMDS+=("$n. Gristmill: \`${CMD[put1m-proxy]}\`; baseline: same fio run")
  else
    n=$((n + 1))
    echo "| $n | PUT 1 MiB durable, direct | MiB/s | $(fmt "$put_direct") | (fio not available) | n/a | | report |"
    ROWCMDS+=("$n. Gristmill: \`${CMD[put1m-direct]}\`; fio row omitted: fio is not installed (apt-get install -y fio)")
    n=$((n + 1))
    echo "| $n | PUT 1 MiB durable, via proxy 307 | MiB/s | $(fmt "$put_proxy") | (fio not available) | n/a | | report |"
    ROWCMDS+=("$n. Gristmill: \`${CMD[put1m-proxy]}\`")
  fi
  n=$((n + 1))
  echo "| $n | PUT 1 MiB durable, S3 API through the proxy (SigV4) | MiB/s | $(fmt "$put_s3") | native direct $(fmt "$put_direct") | $(ratio "$put_s3" "$put_direct") | | report |"
  ROWCMDS+=("$n. Gristmill: \`${CMD[put1m-s3]}\`; baseline: \`${CMD[put1m-direct]}\`")
  local w s g_rps g_mib n_rps n_mib
  for w in "${wrk_rows[@]}"; do
    read -r s g_rps g_mib n_rps n_mib <<<"$w"
    n=$((n + 1))
    if [ "$s" = 1m ]; then
      echo "| $n | wrk GET 1 MiB, one object, direct | MiB/s | $(fmt "$g_mib") | nginx $(fmt "$n_mib") | $(ratio "$g_mib" "$n_mib") | (≥ 0.9) | cross-check |"
    else
      echo "| $n | wrk GET 16 KiB, one object, direct | req/s | $(fmt "$g_rps") | nginx $(fmt "$n_rps") | $(ratio "$g_rps" "$n_rps") | (≥ 0.8) | cross-check |"
    fi
    ROWCMDS+=("$n. Gristmill: \`${CMD[wrk$s-direct]}\`; baseline: \`${CMD[wrk$s-nginx]}\`")
  done
  echo
  echo "Commands (grist-bench = $BENCH; every grist-bench row also had \`--json --interval 0\`):"
  echo
  printf '%s\n' "${ROWCMDS[@]}"
  echo
  echo "Latency of the GET rows (median round, ms): p50 / p99"
  echo
  echo "| row | Gristmill p50 | p99 | nginx p50 | p99 |"
  echo "|---|---|---|---|---|"
  local k sys
  for k in get1m-proxy get1m-direct get16k-proxy get16k-direct; do
    sys=${k%-*}-nginx
    echo "| $k | $(awk -v v="$(metric lat_us.p50 GET "$k.r*" 2>/dev/null || echo 0)" 'BEGIN{printf "%.2f", v/1000}') | $(awk -v v="$(metric lat_us.p99 GET "$k.r*" 2>/dev/null || echo 0)" 'BEGIN{printf "%.2f", v/1000}') | $(awk -v v="$(metric lat_us.p50 GET "$sys.r*" 2>/dev/null || echo 0)" 'BEGIN{printf "%.2f", v/1000}') | $(awk -v v="$(metric lat_us.p99 GET "$sys.r*" 2>/dev/null || echo 0)" 'BEGIN{printf "%.2f", v/1000}') |"
  done
  echo
  echo "CPU per operation (median round; server = all gristd nodes or all nginx processes, client ="
  echo "grist-bench; busy = (server + client CPU) / (elapsed x $(nproc) CPUs)):"
  echo
  echo "| row | system | server CPU µs/op | client CPU µs/op | machine busy |"
  echo "|---|---|---|---|---|"
  local key srv cli busy
  for key in get1m-nginx get1m-proxy get1m-direct get16k-nginx get16k-proxy get16k-direct \
    s3get1m-nginxhop s3get1m-grist s3get16k-nginxhop s3get16k-grist s3get1m-target s3get16k-target \
    batch16k-grist arch16k-grist; do
    read -r srv cli busy < <(cpu_per_op GET "$key.r*")
    case $key in *nginx*) sys=nginx ;; *) sys=Gristmill ;; esac
    echo "| $key | $sys | $srv | $cli | $busy% |"
  done
  for key in put1m-direct put1m-proxy put1m-s3; do
    read -r srv cli busy < <(cpu_per_op PUT "$key")
    echo "| $key | Gristmill | $srv | $cli | $busy% |"
  done
  local w
  for w in "${wrk_cpu[@]}"; do
    read -r key sys srv <<<"$w"
    echo "| $key | $sys | $srv | (wrk) | |"
  done
  echo
  echo "Peak RSS (VmHWM) during the run:"
  echo
  echo "| process | listen | pid | peak RSS |"
  echo "|---|---|---|---|"
  local line role listen pid hwm
  for line in "${rss_lines[@]}"; do
    read -r role listen pid hwm <<<"$line"
    echo "| gristd $role | $listen | $pid | $((hwm / 1024)) MiB |"
  done
  echo "| gristd playground (supervisor) | | $pg_pid | $((pg_hwm / 1024)) MiB |"
  echo "| nginx (largest process) | 127.0.0.1:$nginx_port | $nginx_pid | $((ngx_hwm / 1024)) MiB |"
}
report_file=$workdir/report.md
report >"$report_file"
cat "$report_file"
if [ -n "$out" ]; then
  cp "$report_file" "$out"
fi
