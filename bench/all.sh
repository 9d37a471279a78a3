#!/usr/bin/env bash
# Every campaign and benchmark whose figures docs/benchmarks.md quotes, each writing its log (and
# JSON where it has one) into OUT; their headline lines are printed at the end. Long: about two
# hours on 2 cores (the fault campaigns dominate).
# Usage: bench/all.sh BUILD_DIR [OUT]     (make bench-all)
set -euo pipefail
BUILD=$(cd "$1" && pwd)
OUT=${2:-$BUILD/bench-results}
HERE=$(cd "$(dirname "$0")" && pwd)
METAOP=$BUILD/metaop
MODELS=$BUILD/models
PY=/usr/bin/python3
mkdir -p "$OUT"
stamp() { echo "[$(date +%H:%M:%S)] $*"; }

stamp "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
stamp "models"
$PY "$HERE/../tests/models/export_torchvision.py" "$MODELS" > "$OUT/export.log"

stamp "speed: reference and check against LibTorch (resnet50, 1 and 2 threads)"
"$BUILD/bench/bench_reference_vs_torch" "$MODELS" resnet50 1 > "$OUT/reference_vs_torch_1.log"
"$BUILD/bench/bench_reference_vs_torch" "$MODELS" resnet50 2 > "$OUT/reference_vs_torch_2.log"
stamp "speed: the ort binding against ONNX Runtime's own run (resnet50)"
"$BUILD/bench/bench_ort_overhead" "$MODELS" resnet50 > "$OUT/ort_overhead.log"

stamp "oracle: tightness and sensitivity per op"
"$BUILD/bench/bench_oracle" /usr/share/libonnx-testdata/data/node --json "$OUT/oracle.json" \
  > "$OUT/oracle.md"

stamp "probe: every op, torch/onednn/opencv, and ort/ort-wasm"
/usr/bin/time -f "%e s" -o "$OUT/probe.time" "$METAOP" probe --json "$OUT/probe.json" \
  --out "$OUT/probe-repro" > "$OUT/probe.log" || true
/usr/bin/time -f "%e s" -o "$OUT/probe_ort.time" "$METAOP" probe --bind ort,ort-wasm \
  --json "$OUT/probe_ort.json" --out "$OUT/probe-ort-repro" > "$OUT/probe_ort.log" || true

stamp "training step against PyTorch (resnet18)"
$PY "$HERE/train_vs_torch.py" "$METAOP" "$OUT/train_vs_torch" 3 > "$OUT/train_vs_torch.log"

stamp "fault campaign: check (12 torchvision models)"
$PY "$HERE/faults.py" "$METAOP" "$MODELS" --json "$OUT/faults.json" > "$OUT/faults.log"
stamp "fault campaign: train --check (gradients and updates)"
$PY "$HERE/grad_faults.py" "$METAOP" "$OUT/grad_faults" --json "$OUT/grad_faults.json" \
  > "$OUT/grad_faults.log"

stamp "diagnose: faulty training setups (variant 0 and held-out variants 8-10), monitoring overhead"
for v in 0 8 9 10; do
  $PY "$HERE/diagnose/run.py" "$METAOP" "$OUT/diagnose_$v" --variant $v \
    --json "$OUT/diagnose_$v.json" > "$OUT/diagnose_$v.log"
done
$PY "$HERE/diagnose/overhead.py" "$METAOP" "$OUT/diagnose_overhead" --repeats 7 \
  --json "$OUT/diagnose_overhead.json" > "$OUT/diagnose_overhead.log"

stamp "done; headline figures:"
for f in reference_vs_torch_1 reference_vs_torch_2 ort_overhead; do
  echo "== $f"; tail -8 "$OUT/$f.log"
done
echo "== oracle"; tail -1 "$OUT/oracle.md"
echo "== probe"; tail -2 "$OUT/probe.log"; cat "$OUT/probe.time"
echo "== probe ort"; tail -2 "$OUT/probe_ort.log"; cat "$OUT/probe_ort.time"
echo "== train_vs_torch"; tail -4 "$OUT/train_vs_torch.log"
echo "== faults"; grep -A6 "^injections" "$OUT/faults.log"
echo "== grad_faults"; grep -A5 "faults$" "$OUT/grad_faults.log"
for v in 0 8 9 10; do echo "== diagnose variant $v"; tail -4 "$OUT/diagnose_$v.log"; done
echo "== diagnose overhead"; tail -4 "$OUT/diagnose_overhead.log"
