#!/usr/bin/env bash
# The fuzz targets' short run in `make test`: configure and build them with clang in BUILD_DIR,
# seed them from the ONNX conformance data and run each for SECONDS.
# Usage: ci.sh SOURCE_DIR BUILD_DIR TESTDATA_DIR SECONDS
set -eu
SRC=$1 BUILD=$2 TESTDATA=$3 SECONDS_EACH=$4
cmake -S "$SRC/tests/fuzz" -B "$BUILD" -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j2 >/dev/null
/usr/bin/python3 "$SRC/tests/fuzz/make_seeds.py" "$BUILD/seeds" "$TESTDATA"
bash "$SRC/tests/fuzz/run.sh" "$BUILD" "$SECONDS_EACH"
