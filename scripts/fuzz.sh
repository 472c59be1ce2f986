#!/usr/bin/env bash
# Runs the cargo-fuzz targets of the shard readers (tar, tgz, tar_lz4, zip, index) for a
# bounded time each. Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
# Seed corpora (small archives from Python's tarfile/zipfile and the lz4 tool) are made on
# the first run under shard/fuzz/corpus/; crashes land in shard/fuzz/artifacts/.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET (default 30)] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
fuzz_dir=shard/fuzz
secs=${1:-30}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(tar tgz tar_lz4 zip index)

# The fuzz build (instrumented, nightly) must not share artifacts with the normal build.
export CARGO_TARGET_DIR="$root/build/fuzz"

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

status=0
for t in "${targets[@]}"; do
  echo "==> fuzzing $t for ${secs}s"
  mkdir -p "$fuzz_dir/corpus/$t"
  if ! cargo +nightly fuzz run --fuzz-dir "$fuzz_dir" "$t" "$fuzz_dir/corpus/$t" -- \
      -max_total_time="$secs" -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 2>"$CARGO_TARGET_DIR/fuzz-$t.log"; then
    echo "FAILED: $t (see $CARGO_TARGET_DIR/fuzz-$t.log and $fuzz_dir/artifacts/$t/)" >&2
    tail -40 "$CARGO_TARGET_DIR/fuzz-$t.log" >&2
    status=1
    continue
  fi
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ *DONE)" "$CARGO_TARGET_DIR/fuzz-$t.log" || true
done
exit $status
