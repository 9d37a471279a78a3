#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each from its seeds (and the corpus it grew before), then
# prints executions, coverage and crashes per target. Exit 1 when a target found a crash, a
# leak, a timeout (-timeout) or an allocation past -rss_limit_mb (artifacts in BUILD/artifacts).
# Usage: run.sh BUILD_DIR SECONDS
set -u
BUILD=$1 SECONDS_EACH=$2
failed=0
mkdir -p "$BUILD/artifacts"
printf '%-18s %12s %10s %8s %8s %s\n' target executions exec/s cov corpus result
for t in onnx npy tensor_proto repro; do
  corpus="$BUILD/corpus/$t"
  mkdir -p "$corpus"
  log="$BUILD/fuzz_$t.log"
  "$BUILD/fuzz_$t" "$corpus" "$BUILD/seeds/$t" -max_total_time="$SECONDS_EACH" \
    -rss_limit_mb=2048 -timeout=20 -max_len=262144 -print_final_stats=1 \
    -artifact_prefix="$BUILD/artifacts/$t-" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  units=$(find "$corpus" -type f | wc -l)
  result=ok
  if [ $rc -ne 0 ]; then
    result="FAILED (exit $rc): $(grep -m1 -E 'ERROR|SUMMARY|deadly|timeout|out-of-memory' "$log")"
    failed=1
  fi
  printf '%-18s %12s %10s %8s %8s %s\n' "fuzz_$t" "${execs:-?}" "${speed:-?}" "${cov:-?}" "$units" "$result"
done
exit $failed
