"""Writes the node tests of the current `onnx` package as backend-test folders
(DIR/test_NAME/model.onnx, test_data_set_K/input_J.pb and output_J.pb), the layout of Debian's
ONNX 1.12 test data that `metaop conform` reads. The PyPI wheel ships the test cases as Python
code (onnx.backend.test.case.node) but not their data, and its `backend-test-tools
generate-data` writes the model tests only.

Runs under the project's Python environment: .venv/bin/python scripts/onnx_node_tests.py DIR
"""

import os
import shutil
import sys
import warnings

import onnx
from onnx import TensorProto, numpy_helper
from onnx.backend.test.case import node


# Tests left out, each with the reason. The expected outputs of these expanded (function-body)
# Attention graphs in bfloat16 and float16 carry the roundings of ONNX's reference evaluator,
# whose numpy bfloat16/float16 arithmetic rounds inside each op: measured against attention in
# float64 on the same inputs, MetaOp's reference (each node exact, rounded once to the output
# type, as the ONNX text defines the ops) is closer at the largest and the mean element in all
# seven (docs/conformance.md), yet differs from the expected values by 1-2 units in the last place.
SKIP = {
    "test_attention_3d_causal_bf16_expanded": "expected values carry the evaluator's roundings",
    "test_attention_4d_attn_mask_causal_bf16_expanded": "as above",
    "test_attention_4d_causal_bf16_expanded": "as above",
    "test_attention_4d_causal_fp16_expanded": "as above",
    # The Attention node itself in bfloat16: the evaluator computes it in NumPy bfloat16 too.
    "test_attention_3d_causal_bf16": "as above",
    "test_attention_4d_attn_mask_causal_bf16": "as above",
    "test_attention_4d_causal_bf16": "as above",
    # The inverse DFT's expected values carry NumPy's float32 FFT error: up to 1.47e-6 off the
    # exact inverse of the inputs (values up to 54), so at the elements whose exact value is
    # near 0 they are 1.9e-7 from it, past the tests' absolute tolerance of 1e-7. MetaOp's
    # result is the exact value rounded once (largest error 4.4e-7, within half a float32 unit).
    "test_dft_inverse": "expected values carry NumPy's float32 FFT error",
    "test_dft_inverse_opset19": "as above",
}


def proto_of(value, value_info):
    t = value_info.type
    if t.HasField("sequence_type"):
        return numpy_helper.from_list(value, value_info.name)
    if t.HasField("optional_type"):
        return numpy_helper.from_optional(value, value_info.name)
    if t.HasField("map_type"):
        return numpy_helper.from_dict(value, value_info.name)
    if isinstance(value, TensorProto):
        return value
    return numpy_helper.from_array(value, value_info.name)


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: onnx_node_tests.py DIR\n")
        return 2
    out = sys.argv[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators' numpy overflow warnings
        cases = node.collect_testcases(None)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    written = 0
    for case in cases:
        if case.name in SKIP:
            print(f"left out {case.name}: {SKIP[case.name]}")
            continue
        d = os.path.join(out, case.name)
        os.makedirs(d)
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        graph = case.model.graph
        for k, (inputs, outputs) in enumerate(case.data_sets):
            ds = os.path.join(d, f"test_data_set_{k}")
            os.makedirs(ds)
            for what, values, infos in (("input", inputs, graph.input),
                                        ("output", outputs, graph.output)):
                for j, v in enumerate(values):
                    with open(os.path.join(ds, f"{what}_{j}.pb"), "wb") as f:
                        f.write(proto_of(v, infos[j]).SerializeToString())
        written += 1
    print(f"{written} node tests of onnx {onnx.__version__} in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
