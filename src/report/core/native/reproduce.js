// ONNX Runtime's npm build alone on this reproducer folder (no MetaOp): runs model.onnx on the
// folder's inputs through PACKAGE (as MetaOp's binding runs it: the graph optimization level the
// finding was made at, "all" by default, and one intra-op thread) and prints, per output, ONNX Runtime's value, the exact value (MetaOp's
// float64 reference, rounded once to the output's dtype) and the error in ULPs at the worst
// element, with how many elements are off by more than 4 ULPs or non-finite on one side only.
// Exit 1 when ONNX Runtime still gives, at that element, the value the finding recorded (the
// finding reproduces), 0 when it no longer does, 2 when it cannot run the model.
//
// Needs Node.js and the npm package PACKAGE (`npm install PACKAGE@VERSION --ignore-scripts`
// here, or NODE_PATH naming the node_modules that has it); nothing else. Usage:
//   node reproduce_BINDING.js
'use strict';

const fs = require('fs');
const path = require('path');

const PACKAGE = '%PACKAGE%';    // written by MetaOp: onnxruntime-node or onnxruntime-web
const PROVIDER = '%PROVIDER%';  // cpu or wasm
const HERE = __dirname;

// A .npy file (little-endian, C order) as an ONNX Runtime tensor type and a typed array.
const NPY = {
  '<f4': ['float32', Float32Array], '<f8': ['float64', Float64Array], '<i8': ['int64', BigInt64Array],
  '<i4': ['int32', Int32Array], '<i2': ['int16', Int16Array], '|i1': ['int8', Int8Array],
  '|u1': ['uint8', Uint8Array], '<u2': ['uint16', Uint16Array], '<u4': ['uint32', Uint32Array],
  '<u8': ['uint64', BigUint64Array], '|b1': ['bool', Uint8Array], '<f2': ['float16', Uint16Array],
};

function load(file) {
  const buf = fs.readFileSync(path.join(HERE, file));
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  const len = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', start, start + len);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order`);
  const dims = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim())
    .filter((s) => s.length).map(Number);
  if (!NPY[descr]) throw new Error(`${file}: dtype ${descr}`);
  const [type, Array_] = NPY[descr];
  const n = dims.reduce((a, b) => a * b, 1);
  const bytes = buf.subarray(start + len, start + len + n * Array_.BYTES_PER_ELEMENT);
  const data = new Array_(n);
  new Uint8Array(data.buffer).set(bytes);
  return { type, dims, data: type === 'bool' ? Uint8Array.from(data, (v) => (v ? 1 : 0)) : data };
}

function value(t, i) {
  const v = t.data[i];
  if (typeof v === 'bigint') return Number(v);
  if (t.type === 'float16') return half(v);
  if (t.type === 'bool') return v ? 1 : 0;
  return v;
}

function half(h) {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

// The distance from |x| to the next value of `type` away from 0 (at the largest finite value,
// the last step below it).
function spacing(x, type) {
  const a = Math.abs(x);
  if (type === 'float64') {
    const f = new Float64Array([a]);
    const u = new BigUint64Array(f.buffer);
    u[0] += 1n;
    return Number.isFinite(f[0]) ? f[0] - a : a - (u[0] -= 2n, f[0]);
  }
  if (type === 'float16') {
    const e = a < 2 ** -14 ? -14 : Math.floor(Math.log2(a));
    return 2 ** (e - 10);
  }
  const f = new Float32Array([a]);
  const u = new Uint32Array(f.buffer);
  u[0] += 1;
  return Number.isFinite(f[0]) ? f[0] - Math.fround(a) : Math.fround(a) - (u[0] -= 2, f[0]);
}

function ulps(got, exact, type) {
  if (got === exact || (Number.isNaN(got) && Number.isNaN(exact))) return 0;
  if (!Number.isFinite(got) || !Number.isFinite(exact)) return Infinity;
  const step = spacing(exact, type);
  return Math.abs(got - exact) / (step > 0 ? step : Number.MIN_VALUE);
}

function num(v) {
  if (!Number.isFinite(v)) return String(v).replace('Infinity', 'inf').replace('NaN', 'nan');
  return Number(v.toPrecision(9)).toString();
}

// An error in ULPs as Python's %.3g writes it ("9.47e+06", "inf").
function ulpText(e) {
  if (!Number.isFinite(e)) return num(e);
  return e.toPrecision(3).replace(/e([+-])(\d)$/, 'e$10$2');
}

function index(dims, i) {
  const out = [];
  for (let d = dims.length - 1; d >= 0; --d) {
    out.unshift(i % dims[d]);
    i = Math.floor(i / dims[d]);
  }
  return `[${out.join(', ')}]`;
}

async function main() {
  const manifest = JSON.parse(fs.readFileSync(path.join(HERE, 'repro.json'), 'utf8'));
  let ort, results;
  try {
    ort = require(PACKAGE);
    if (PROVIDER === 'wasm') {
      ort.env.wasm.numThreads = 1;
      ort.env.logLevel = 'error';
    }
    const session = await ort.InferenceSession.create(
      new Uint8Array(fs.readFileSync(path.join(HERE, 'model.onnx'))),
      { executionProviders: [PROVIDER],
        graphOptimizationLevel: (manifest.level && manifest.level.value) || 'all',
        executionMode: 'sequential', intraOpNumThreads: 1 });
    const feeds = {};
    for (const [name, file] of manifest.feeds) {
      const t = load(file);
      feeds[name] = new ort.Tensor(t.type, t.data, t.dims);
    }
    results = await session.run(feeds);
  } catch (e) {  // the package is missing, or ONNX Runtime refuses or fails running the model
    console.log(`${PACKAGE} cannot run model.onnx: ${e.message}`);
    return 2;
  }
  const version = (ort.env.versions || {})[PROVIDER === 'wasm' ? 'web' : 'node'] || '(version unknown)';
  console.log(`${PACKAGE} ${version} (${PROVIDER}): ${manifest.op_type} node '${manifest.node}' ` +
              `of model.onnx on ${manifest.feeds.map((f) => f[1]).join(', ') || 'no inputs'}`);
  let reproduces = false;
  for (const o of manifest.outputs) {
    if (!o.reference || !results[o.name]) continue;
    const exact = load(o.reference);
    const got = { type: results[o.name].type, data: results[o.name].data };
    const n = exact.data.length;
    const float = exact.type.startsWith('float');
    const err = (t, i) => (float ? ulps(value(t, i), value(exact, i), exact.type)
      : value(t, i) === value(exact, i) ? 0 : Infinity);
    let worst = 0, off = 0, oneSided = 0;
    for (let i = 0; i < n; ++i) {
      const e = err(got, i);
      if (e > err(got, worst)) worst = i;
      if (e > 4) ++off;
      if (e === Infinity) ++oneSided;
    }
    console.log(`${o.name}${index(exact.dims, worst)}: onnxruntime ${num(value(got, worst))}, exact ` +
                `${num(value(exact, worst))}, error ${ulpText(err(got, worst))} ULPs; ${off} of ${n} ` +
                `elements off by more than 4 ULPs, ${oneSided} non-finite on one side only`);
    if (!o.got) continue;
    // Reproduced: ONNX Runtime gives again the wrong value the finding recorded at its worst
    // element.
    const recorded = load(o.got);
    let j = 0;
    for (let i = 0; i < n; ++i) if (err(recorded, i) > err(recorded, j)) j = i;
    const a = value(got, j), r = value(recorded, j);
    const same = err(recorded, j) > 0 && (a === r || (Number.isNaN(a) && Number.isNaN(r)));
    console.log(`  the finding recorded ${num(r)} at ${index(exact.dims, j)}; onnxruntime gives ` +
                `${num(a)} there: ${same ? 'reproduced' : 'not reproduced'}`);
    reproduces = reproduces || same;
  }
  return reproduces ? 1 : 0;
}

main().then((code) => process.exit(code), (e) => {
  console.log(`reproduce: ${e.stack || e}`);
  process.exit(2);
});
