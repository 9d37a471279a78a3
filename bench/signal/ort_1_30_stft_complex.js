// Run by node with onnxruntime-node 1.30 (third_party/node/node_modules): the STFT model that
// make_stft_complex.py wrote into the folder given, against its float64 expectation.
const ort = require('onnxruntime-node');
const fs = require('fs');
const path = require('path');
(async () => {
  const dir = process.argv[2];
  const read = (f) => {
    const b = fs.readFileSync(path.join(dir, f));
    return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
  };
  const session = await ort.InferenceSession.create(path.join(dir, 'stft_complex.onnx'));
  const out = await session.run({signal: new ort.Tensor('float32', read('stft_signal.bin'), [1, 20, 2])});
  const got = out.y.data, want = read('stft_expected.bin');
  let worst = 0;
  for (let i = 0; i < want.length; ++i) worst = Math.max(worst, Math.abs(got[i] - want[i]));
  console.log(`onnxruntime-node ${require('onnxruntime-node/package.json').version}: STFT of a complex ` +
              `signal, max |ORT - exact| = ${worst.toPrecision(3)} (first values ${got[0].toFixed(4)}, ` +
              `${got[1].toFixed(4)}; exact ${want[0].toFixed(4)}, ${want[1].toFixed(4)})`);
})();
