#!/usr/bin/env bash
# Runs the cargo-fuzz targets for a bounded time each: the shard readers (shard/fuzz: tar,
# tgz, tar_lz4, zip, index) and core's parsers of untrusted input (core/fuzz: object_name,
# range, list_token, s3_xml, action_json, auth_tokens). Needs the nightly toolchain and
# cargo-fuzz (`cargo install cargo-fuzz`).
# Seed corpora (small archives from Python's tarfile/zipfile and the lz4 tool; names, ranges,
# messages and XML documents for core) are made on the first run under <fuzz dir>/corpus/;
# crashes land in <fuzz dir>/artifacts/<target>/ — turn each into a regression test.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET (default 30)] [TARGET...]
# FUZZ_BUILD_FLAGS: extra `cargo fuzz run` flags, e.g. "--dev -s none" (an unoptimized build
# without AddressSanitizer: overflow checks and debug assertions stay on; it builds in less
# than half the time, which is what a short smoke run in the test command needs).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
fuzz_dir=shard/fuzz
core_fuzz=core/fuzz
core_targets=(object_name range list_token s3_xml action_json auth_tokens)
secs=${1:-30}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(tar tgz tar_lz4 zip index "${core_targets[@]}")
# The fuzz package a target belongs to.
dir_of() {
  local t
  for t in "${core_targets[@]}"; do [ "$t" = "$1" ] && { echo "$core_fuzz"; return; }; done
  echo "$fuzz_dir"
}

# The fuzz build (instrumented, nightly) must not share artifacts with the normal build.
export CARGO_TARGET_DIR="$root/build/fuzz"
mkdir -p "$CARGO_TARGET_DIR"  # the logs live there, before the first build makes it

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "cargo-fuzz on nightly is needed: rustup toolchain install nightly && cargo install cargo-fuzz" >&2
  exit 1
fi

python=python3
[ -x "$root/.venv/bin/python" ] && python="$root/.venv/bin/python"
if [ ! -d "$fuzz_dir/corpus" ] && command -v "$python" >/dev/null 2>&1; then
  echo "==> seeding corpora in $fuzz_dir/corpus"
  "$python" - "$fuzz_dir/corpus" <<'PY'
import io, os, shutil, subprocess, sys, tarfile, zipfile, gzip
out = sys.argv[1]
for t in ("tar", "tgz", "tar_lz4", "zip", "index"):
    os.makedirs(os.path.join(out, t), exist_ok=True)
files = [("a/0001.jpg", b"\xff\xd8" + b"x" * 40), ("a/0001.cls", b"3"), ("empty", b""),
         ("long/" + "n" * 120 + ".txt", b"long"), ("\u00fcn\u00ef.txt", b"u")]
def tar_bytes(fmt):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        d = tarfile.TarInfo("dir"); d.type = tarfile.DIRTYPE; tf.addfile(d)
        for name, data in files:
            ti = tarfile.TarInfo(name); ti.size = len(data); tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()
def put(target, name, data):
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data)
lz4 = shutil.which("lz4")
for fmt, tag in ((tarfile.PAX_FORMAT, "pax"), (tarfile.GNU_FORMAT, "gnu"), (tarfile.USTAR_FORMAT, "ustar")):
    try:
        tar = tar_bytes(fmt)
    except ValueError:  # ustar cannot hold the long name
        continue
    put("tar", tag, tar)
    put("index", tag, tar)
    put("tgz", tag + "-as-tar", b"\x00" + tar)
    put("tgz", tag + "-raw", b"\x01" + gzip.compress(tar, mtime=0))
    put("tar_lz4", tag + "-as-tar", b"\x00" + tar)
    if lz4:
        put("tar_lz4", tag + "-raw", b"\x01" + subprocess.run([lz4, "-c", "-q"], input=tar, capture_output=True, check=True).stdout)
for method, tag in ((zipfile.ZIP_DEFLATED, "deflated"), (zipfile.ZIP_STORED, "stored")):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as zf:
        zf.writestr("dir/", b"")
        for name, data in files:
            zf.writestr(name, data)
    put("zip", tag, buf.getvalue())
PY
fi

if [ ! -d "$core_fuzz/corpus" ]; then
  echo "==> seeding corpora in $core_fuzz/corpus"
  for t in "${core_targets[@]}"; do mkdir -p "$core_fuzz/corpus/$t"; done
  c="$core_fuzz/corpus"
  printf 'train/0001.jpg' >"$c/object_name/plain"
  printf 'a/../b' >"$c/object_name/dotdot"
  printf 'ais://@uuid#ns/bucket/obj\n' >"$c/object_name/uri"
  printf 'sp ace/\xc3\xbc?#%%' >"$c/object_name/escapes"
  printf '\x00\x10\x00\x00\x00\x00\x00\x00bytes=0-99' >"$c/range/first"
  printf '\x00\x10\x00\x00\x00\x00\x00\x00bytes=-10' >"$c/range/suffix"
  printf '\x00\x10\x00\x00\x00\x00\x00\x00bytes=5-' >"$c/range/open"
  printf '{"action":"list","value":{"prefix":"a/","pagesize":100,"continuation_token":"a/9","props":"name,size"}}' >"$c/list_token/lso"
  printf 'YS8wMDAx' >"$c/list_token/token"
  printf '\x00<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"e"</ETag></Part></CompleteMultipartUpload>' >"$c/s3_xml/complete"
  printf '\x01<Delete><Object><Key>k</Key></Object><Quiet>true</Quiet></Delete>' >"$c/s3_xml/delete"
  printf '\x03<Tagging><TagSet><Tag><Key>a</Key><Value>b</Value></Tag></TagSet></Tagging>' >"$c/s3_xml/tagging"
  printf '\x01{"action":"copy-bck","value":{"tobck":{"name":"d","provider":"ais"},"prefix":"x"}}' >"$c/action_json/copy"
  printf '\x03{"action":"set-bprops","value":{"lru":{"quota":1024},"versioning":{"validate_warm_get":true}}}' >"$c/action_json/props"
  printf '\x00{"in":[{"objname":"o","bucket":"b"},{"uname":"ais/@#/c/o2"}],"coer":true}' >"$c/action_json/batch"
  printf 'eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln' >"$c/auth_tokens/jwt"
  printf 'gexp=1&guser=ro&gsig=AAAA' >"$c/auth_tokens/redirect"
  printf 'write:team-*' >"$c/auth_tokens/role"
  printf '/v1/objects/b/o' >"$c/auth_tokens/path"
fi

status=0
for t in "${targets[@]}"; do
  fuzz_dir=$(dir_of "$t")
  echo "==> fuzzing $t for ${secs}s"
  mkdir -p "$fuzz_dir/corpus/$t"
  # shellcheck disable=SC2086 # the flags are words
  if ! cargo +nightly fuzz run ${FUZZ_BUILD_FLAGS:-} --fuzz-dir "$fuzz_dir" "$t" "$fuzz_dir/corpus/$t" -- \
      -max_total_time="$secs" -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 2>"$CARGO_TARGET_DIR/fuzz-$t.log"; then
    echo "FAILED: $t (see $CARGO_TARGET_DIR/fuzz-$t.log and $fuzz_dir/artifacts/$t/)" >&2
    tail -40 "$CARGO_TARGET_DIR/fuzz-$t.log" >&2
    status=1
    continue
  fi
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ *DONE)" "$CARGO_TARGET_DIR/fuzz-$t.log" || true
done
exit $status
