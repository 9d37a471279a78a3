#!/usr/bin/env bash
# Bad input must give one clear line naming the file, node or value, and exit code 2.
# Usage: cli_errors.sh METAOP DATA_DIR WORK_DIR
set -u
METAOP=$1 DATA=$2 WORK=$3
mkdir -p "$WORK"
passed=0 failed=0

expect() {  # expect NAME EXPECTED_CODE PATTERN -- COMMAND...   (MAX_LINES=n to allow more lines)
  local name=$1 code=$2 pattern=$3 max=${MAX_LINES:-1}
  shift 4
  local err rc
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  local lines
  lines=$(printf '%s' "$err" | grep -c '' || true)
  if [ "$rc" -eq "$code" ] && { [ -z "$pattern" ] || printf '%s' "$err" | grep -qF -- "$pattern"; } && [ "$lines" -le "$max" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL $name: exit $rc (want $code), stderr: $err (want one line containing '$pattern')"
  fi
}

head -c 3000 "$DATA/tiny_cnn.onnx" > "$WORK/truncated.onnx"
: > "$WORK/empty.onnx"
head -c 1000 "$DATA/image_ok.npy" > "$WORK/truncated.npy"

expect truncated_model 2 "$WORK/truncated.onnx" -- "$METAOP" run "$WORK/truncated.onnx" --random-inputs
expect empty_model 2 "empty file" -- "$METAOP" run "$WORK/empty.onnx" --random-inputs
expect missing_model 2 "no_such_model.onnx: no such file" -- "$METAOP" run "$WORK/no_such_model.onnx"
expect unsupported_ops 2 "unsupported operators: RandomNormalLike x2, RandomUniformLike x1" -- "$METAOP" run "$DATA/unsupported_ops.onnx" --random-inputs
expect wrong_shape 2 "image_wrong_shape.npy: shape [1, 3, 8, 8] does not match graph input 'image'" -- \
  "$METAOP" run "$DATA/tiny_cnn.onnx" --input "$DATA/image_wrong_shape.npy"
expect wrong_dtype 2 "image_wrong_dtype.npy: dtype float64 does not match graph input 'image'" -- \
  "$METAOP" run "$DATA/tiny_cnn.onnx" --input "$DATA/image_wrong_dtype.npy"
expect missing_input_file 2 "missing.npy: no such file" -- "$METAOP" run "$DATA/tiny_cnn.onnx" --input "$WORK/missing.npy"
expect truncated_npy 2 "truncated.npy: truncated data" -- "$METAOP" run "$DATA/tiny_cnn.onnx" --input "image=$WORK/truncated.npy"
expect unknown_input_name 2 "has no input named 'nope'" -- "$METAOP" run "$DATA/tiny_cnn.onnx" --input "nope=$DATA/image_ok.npy"
expect no_inputs 2 "no value for input 'image'" -- "$METAOP" run "$DATA/tiny_cnn.onnx"
expect bad_range 2 "--range" -- "$METAOP" run "$DATA/tiny_cnn.onnx" --random-inputs --range 3,1
MAX_LINES=2 expect bad_flag 2 "--no-such-flag" -- "$METAOP" run "$DATA/tiny_cnn.onnx" --no-such-flag
expect good_run 0 "" -- "$METAOP" run "$DATA/tiny_cnn.onnx" --input "image=$DATA/image_ok.npy" --out "$WORK/out"

# The written output must be a readable .npy of the right shape.
if [ -f "$WORK/out/log_probs.npy" ] && /usr/bin/python3 -c "import numpy as np,sys; a=np.load(sys.argv[1]); sys.exit(0 if a.shape==(1,10) and a.dtype==np.float32 else 1)" "$WORK/out/log_probs.npy"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAIL output_npy: $WORK/out/log_probs.npy missing or wrong"
fi

# --dump writes every intermediate value (9 nodes, 9 outputs in the tiny CNN) with an index.
expect dump 0 "" -- "$METAOP" run "$DATA/tiny_cnn.onnx" --input "image=$DATA/image_ok.npy" --dump "$WORK/dump"
if [ "$(wc -l < "$WORK/dump/index.txt")" -eq 9 ] && /usr/bin/python3 -c "
import sys, numpy as np
rows = [l.rstrip('\n').split('\t') for l in open(sys.argv[1] + '/index.txt')]
last = np.load(sys.argv[1] + '/' + rows[-1][4])
out = np.load(sys.argv[2])
sys.exit(0 if np.array_equal(last, out) else 1)" "$WORK/dump" "$WORK/out/log_probs.npy"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAIL dump_index: $WORK/dump/index.txt wrong or its last value is not the output"
fi

echo "cli_errors: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
