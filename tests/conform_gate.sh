#!/usr/bin/env bash
# The conformance gate cannot pass by accident: a failing test exits 1 whatever --min-pass says,
# and --expect fails on any test whose status moved (pass -> fail, pass -> unsupported, or back).
# Usage: conform_gate.sh METAOP NODE_TESTS_DIR WORK_DIR
set -u
METAOP=$1 NODE=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK/tests"
cp -r "$NODE/test_relu" "$WORK/tests/"
cp -r "$NODE/test_abs" "$WORK/tests/test_abs_wrong"
# test_abs_wrong's expected output plus one: a test the reference must fail.
/usr/bin/python3 - "$WORK/tests/test_abs_wrong/test_data_set_0/output_0.pb" <<'PY'
import sys
import onnx
from onnx import numpy_helper
t = onnx.TensorProto()
t.ParseFromString(open(sys.argv[1], "rb").read())
open(sys.argv[1], "wb").write(numpy_helper.from_array(numpy_helper.to_array(t) + 1, t.name).SerializeToString())
PY
passed=0 failed=0
check() {  # check NAME WANT_CODE PATTERN -- COMMAND...
  local name=$1 want=$2 pattern=$3
  shift 4
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -eq "$want" ] && printf '%s' "$out" | grep -qF -- "$pattern"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL $name: exit $rc (want $want), output: $out (want '$pattern')"
  fi
}
check min_pass_does_not_hide_a_failure 1 "1 passed, 1 failed" -- \
  "$METAOP" conform "$WORK/tests" --quiet --min-pass 1
printf 'pass test_abs_wrong\npass test_relu\n' > "$WORK/pass_fail.txt"
check pass_became_fail 1 "UNEXPECTED test_abs_wrong: fail where" -- \
  "$METAOP" conform "$WORK/tests" --quiet --expect "$WORK/pass_fail.txt"
printf 'fail test_abs_wrong\nunsupported test_relu\n' > "$WORK/unsupported.txt"
check status_moved_to_pass 1 "UNEXPECTED test_relu: pass where" -- \
  "$METAOP" conform "$WORK/tests" --quiet --expect "$WORK/unsupported.txt"
printf 'fail test_abs_wrong\npass test_relu\npass test_gone\n' > "$WORK/missing.txt"
check listed_test_not_run 1 "UNEXPECTED test_gone: expected pass, not run" -- \
  "$METAOP" conform "$WORK/tests" --quiet --expect "$WORK/missing.txt"
# --errata admits a named test's failure only in the words it gives, and never a pass.
printf 'test_abs_wrong\telement 0 is\tthe data is off by one\n' > "$WORK/errata.txt"
printf 'erratum test_abs_wrong\npass test_relu\n' > "$WORK/erratum.txt"
check erratum_admits_its_failure 0 "1 passed, 0 failed, 0 unsupported, 1 failing as" -- \
  "$METAOP" conform "$WORK/tests" --quiet --errata "$WORK/errata.txt" --expect "$WORK/erratum.txt"
printf 'test_abs_wrong\telement 3 is 7\tanother failure\n' > "$WORK/other.txt"
check erratum_admits_no_other_failure 1 "not the failure" -- \
  "$METAOP" conform "$WORK/tests" --quiet --errata "$WORK/other.txt"
printf 'test_relu\telement 0 is\tno such failure\n' > "$WORK/passing.txt"
check erratum_of_a_passing_test 1 "UNEXPECTED test_relu: pass, not the failure" -- \
  "$METAOP" conform "$WORK/tests" --quiet --errata "$WORK/passing.txt"
printf 'pass test_relu\n' > "$WORK/relu.txt"
rm -rf "$WORK/tests/test_abs_wrong"
check all_as_expected 0 "1 of 1 tests as" -- \
  "$METAOP" conform "$WORK/tests" --quiet --expect "$WORK/relu.txt"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
