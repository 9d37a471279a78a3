// ONNX Runtime worker for MetaOp's `ort-1.30` and `ort-wasm` bindings (the npm builds). Runs models through the
// package's own JavaScript API (onnxruntime-node: the CPU library with MLAS; onnxruntime-web:
// the WebAssembly build) in a process of its own, so that a crash or a hang of ONNX Runtime
// does not take MetaOp down. MetaOp starts it as `node ort_worker.js cpu|wasm` with one end of
// a socket pair on fd 3, for requests and replies (stdout and stderr stay free for ONNX
// Runtime's own logging).
//
// Frames (src/bindings/onnx_import/adapter_process.h) are little-endian and length-prefixed: u32 length, then the body. Requests:
//   'L' u32 session, u8 level, u32 threads, bytes model      -> create and cache a session
//   'R' u32 session, u32 n, n x tensor, u32 m, m x string    -> run; the m outputs by name
//   'F' u32 session                                          -> forget a session
//   'V'                                                      -> versions (a handshake)
// Replies: 'O' then the payload ('R': u32 n, n x tensor; 'V': string), or 'U' (ONNX Runtime
// refuses the model: no kernel, a type or attribute it lacks) or 'E' (it failed while
// running) followed by the message. A string is u32 length + UTF-8; a tensor is a string
// (name), u8 ONNX element type, u32 rank, rank x i64 dims, u64 byte count, padding to 8 bytes
// from the start of the body, then the raw little-endian data.
'use strict';

const fs = require('fs');

const flavor = process.argv[2] || 'cpu';
let ort;
try {
  if (flavor === 'wasm') {
    ort = require('onnxruntime-web');
    ort.env.wasm.numThreads = 1;  // worker threads would need a browser-like environment
    ort.env.logLevel = 'error';
  } else {
    ort = require('onnxruntime-node');
  }
} catch (e) {
  process.stderr.write(`ort_worker: cannot load the ONNX Runtime package for '${flavor}': ${e.message}\n`);
  process.exit(3);
}
const provider = flavor === 'wasm' ? 'wasm' : 'cpu';

const IN = 3, OUT = 3;  // one socket both ways
const LEVELS = ['disabled', 'basic', 'extended', 'all'];

// ONNX element type -> [JavaScript API type, typed array constructor].
const TYPES = {
  1: ['float32', Float32Array], 2: ['uint8', Uint8Array], 3: ['int8', Int8Array],
  4: ['uint16', Uint16Array], 5: ['int16', Int16Array], 6: ['int32', Int32Array],
  7: ['int64', BigInt64Array], 9: ['bool', Uint8Array], 10: ['float16', Uint16Array],
  11: ['float64', Float64Array], 12: ['uint32', Uint32Array], 13: ['uint64', BigUint64Array],
};
const ELEM = {};
for (const [k, v] of Object.entries(TYPES)) ELEM[v[0]] = Number(k);

function readFully(buf) {
  let off = 0;
  while (off < buf.length) {
    let n;
    try {
      n = fs.readSync(IN, buf, off, buf.length - off, null);
    } catch (e) {
      if (e.code === 'EAGAIN' || e.code === 'EINTR') continue;
      throw e;
    }
    if (n === 0) return false;
    off += n;
  }
  return true;
}

function writeFully(buf) {
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(OUT, buf, off, buf.length - off);
    } catch (e) {
      if (e.code === 'EAGAIN' || e.code === 'EINTR') continue;
      throw e;
    }
  }
}

class Reader {
  constructor(buf) { this.buf = buf; this.pos = 0; }
  u8() { return this.buf.readUInt8(this.pos++); }
  u32() { const v = this.buf.readUInt32LE(this.pos); this.pos += 4; return v; }
  i64() { const v = this.buf.readBigInt64LE(this.pos); this.pos += 8; return Number(v); }
  u64() { return this.i64(); }
  str() { const n = this.u32(); const s = this.buf.toString('utf8', this.pos, this.pos + n); this.pos += n; return s; }
  bytes(n) { const b = this.buf.subarray(this.pos, this.pos + n); this.pos += n; return b; }
  align() { this.pos = (this.pos + 7) & ~7; }
  tensor() {
    const name = this.str();
    const elem = this.u8();
    const rank = this.u32();
    const dims = [];
    for (let i = 0; i < rank; ++i) dims.push(this.i64());
    const nbytes = this.u64();
    this.align();
    const t = TYPES[elem];
    if (!t) throw new Error(`input '${name}': element type ${elem} has no JavaScript API type`);
    const start = this.buf.byteOffset + this.pos;
    this.pos += nbytes;
    // The body is a fresh buffer (offset 0) and the data is 8-aligned in it: a view, no copy.
    const data = new t[1](this.buf.buffer, start, nbytes / t[1].BYTES_PER_ELEMENT);
    return [name, new ort.Tensor(t[0], data, dims)];
  }
}

// Reply assembly: small header pieces and the tensors' own bytes, written without copying
// the data into a second buffer.
class Writer {
  constructor() { this.parts = []; this.len = 0; }
  push(b) { this.parts.push(b); this.len += b.length; }
  u8(v) { const b = Buffer.alloc(1); b.writeUInt8(v); this.push(b); }
  u32(v) { const b = Buffer.alloc(4); b.writeUInt32LE(v); this.push(b); }
  i64(v) { const b = Buffer.alloc(8); b.writeBigInt64LE(BigInt(v)); this.push(b); }
  str(s) { const b = Buffer.from(s, 'utf8'); this.u32(b.length); this.push(b); }
  align() {
    // Offsets count from the body's start, which follows the 4-byte length.
    const pad = (8 - (this.len % 8)) % 8;
    if (pad) this.push(Buffer.alloc(pad));
  }
  tensor(name, t) {
    this.str(name);
    const elem = ELEM[t.type];
    if (elem === undefined) throw new Error(`output '${name}' has type ${t.type}, not readable by MetaOp`);
    this.u8(elem);
    this.u32(t.dims.length);
    for (const d of t.dims) this.i64(d);
    const data = t.data;
    this.i64(data.byteLength);
    this.align();
    this.push(Buffer.from(data.buffer, data.byteOffset, data.byteLength));
  }
  send() {
    const len = Buffer.alloc(4);
    len.writeUInt32LE(this.len);
    // Small pieces (headers) are gathered into one write; tensor data goes out as it is.
    let small = [len];
    for (const p of this.parts) {
      if (p.length < 65536) {
        small.push(p);
        continue;
      }
      writeFully(Buffer.concat(small));
      small = [];
      writeFully(p);
    }
    if (small.length) writeFully(Buffer.concat(small));
  }
}

function reply(kind, msg) {
  const w = new Writer();
  w.u8(kind.charCodeAt(0));
  if (msg !== undefined) w.str(msg);
  w.send();
}

const sessions = new Map();

function refusal(message) {
  // Session creation fails when ONNX Runtime has no kernel for the node's types or attribute
  // values, or rejects the model: an answer ("unsupported"), not a defect.
  return message.replace(/\s+/g, ' ').trim();
}

async function handle(body) {
  const r = new Reader(body);
  const op = String.fromCharCode(r.u8());
  if (op === 'V') {
    reply('O', JSON.stringify(ort.env.versions || {}));
  } else if (op === 'L') {
    const id = r.u32();
    const level = LEVELS[r.u8()] || 'all';
    const threads = r.u32();
    const model = r.bytes(body.length - r.pos);
    const options = {
      executionProviders: [provider],
      graphOptimizationLevel: level,
      executionMode: 'sequential',
      logSeverityLevel: 3,
    };
    if (provider === 'cpu') {
      options.intraOpNumThreads = threads;
      options.interOpNumThreads = 1;
    }
    try {
      // The model bytes are copied: the body buffer is reused for the next frame.
      sessions.set(id, await ort.InferenceSession.create(Uint8Array.from(model), options));
      reply('O');
    } catch (e) {
      reply('U', refusal(String(e && e.message ? e.message : e)));
    }
  } else if (op === 'F') {
    const id = r.u32();
    const s = sessions.get(id);
    sessions.delete(id);
    if (s && s.release) await s.release();
    reply('O');
  } else if (op === 'R') {
    const id = r.u32();
    const s = sessions.get(id);
    if (!s) return reply('E', `no session ${id}`);
    const feeds = {};
    const n = r.u32();
    for (let i = 0; i < n; ++i) {
      const [name, t] = r.tensor();
      feeds[name] = t;
    }
    const m = r.u32();
    const names = [];
    for (let i = 0; i < m; ++i) names.push(r.str());
    let out;
    try {
      out = await s.run(feeds, names);
    } catch (e) {
      return reply('E', String(e && e.message ? e.message : e).replace(/\s+/g, ' ').trim());
    }
    // A type MetaOp has no tensors of (strings): an answer, not a crash of the worker.
    for (const name of names)
      if (ELEM[out[name].type] === undefined)
        return reply('U', `output '${name}' has type ${out[name].type}, which MetaOp has no tensors of`);
    const w = new Writer();
    w.u8('O'.charCodeAt(0));
    w.u32(names.length);
    for (const name of names) w.tensor(name, out[name]);
    w.send();
  } else {
    reply('E', `unknown request '${op}'`);
  }
}

async function main() {
  const len = Buffer.alloc(4);
  for (;;) {
    if (!readFully(len)) return;  // MetaOp closed the pipe: done
    const body = Buffer.allocUnsafeSlow(len.readUInt32LE(0));
    if (!readFully(body)) return;
    await handle(body);
  }
}

main().then(() => process.exit(0), (e) => {
  process.stderr.write(`ort_worker: ${e && e.stack ? e.stack : e}\n`);
  process.exit(4);
});
