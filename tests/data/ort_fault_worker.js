// Test double of the ONNX Runtime worker (METAOP_ORT_WORKER): the real worker, except that a run
// whose first input holds the value 1234.5 kills the process with SIGSEGV (a crash of ONNX
// Runtime) and one holding 4321.5 never answers (a hang).
'use strict';
const path = require('path');
const ort = require(process.argv[2] === 'wasm' ? 'onnxruntime-web' : 'onnxruntime-node');
const run = ort.InferenceSession.prototype.run;
ort.InferenceSession.prototype.run = function (feeds, ...rest) {
  for (const t of Object.values(feeds)) {
    if (!(t.data instanceof Float32Array)) continue;
    if (t.data.includes(1234.5)) process.kill(process.pid, 'SIGSEGV');
    if (t.data.includes(4321.5)) for (;;) {}
  }
  return run.call(this, feeds, ...rest);
};
require(path.join(__dirname, '..', '..', 'src', 'bindings', 'ort', 'ort_worker.js'));
