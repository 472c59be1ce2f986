#!/usr/bin/env bash
# Runs the exact-answers suite (tests/tests/cluster/exact.rs) and the versions listing during a
# join (s3.rs) N times in a row with no retry (nextest --retries 0), stops at the first failure,
# and prints one line per run plus a summary. Its figures are in docs/reliability.md.
# Usage: scripts/repeat_exact.sh [RUNS=10] [FILTER]
#   FILTER defaults to both; e.g. 'test(version_listings_stay_exact_while_a_target_joins)'.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-10}"
filter="${2:-test(/^exact::exact_/) | test(version_listings_stay_exact_while_a_target_joins)}"
cargo build --workspace --bins --tests --locked >/dev/null
log_dir="${REPEAT_LOG_DIR:-build/repeat-exact}"
mkdir -p "$log_dir"
passed=0
start_all=$(date +%s)
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  if cargo nextest run -p gristmill-tests --retries 0 --no-fail-fast -E "$filter" \
      >"$log_dir/run-$i.log" 2>&1; then
    passed=$((passed + 1))
    echo "run $i: pass in $(( $(date +%s) - start )) s"
  else
    echo "run $i: FAIL in $(( $(date +%s) - start )) s (log: $log_dir/run-$i.log)"
    grep -E '^\s+(FAIL|PASS|FLAKY)' "$log_dir/run-$i.log" || true
    echo "$passed of $i runs passed"
    exit 1
  fi
done
echo "$passed of $runs runs passed in a row, $(( $(date +%s) - start_all )) s in all"
