"""ONNX Runtime adapter for MetaOp's `ort` binding: the onnxruntime package from PyPI (its CPU
execution provider, MLAS kernels), run through its Python API by
src/bindings/onnx_import/metaop_adapter.py. The npm builds (`ort-1.30`, `ort-wasm`) run in
ort_worker.js instead."""

import onnxruntime as ort

from metaop_adapter import Unsupported

FRAMEWORK = "ONNX Runtime"
# The graph optimization levels of --ort-opt, lowest first; users get "all".
LEVELS = ["disabled", "basic", "extended", "all"]
_LEVELS = [
    ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
]


def version():
    return ort.__version__


def load(model, level, threads):
    options = ort.SessionOptions()
    options.graph_optimization_level = _LEVELS[level]
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # no kernel for the node's types or attributes, or an invalid model
        raise Unsupported(" ".join(str(e).split())) from None
    for value in session.get_inputs() + session.get_outputs():
        if value.type == "tensor(bfloat16)":
            raise Unsupported(f"'{value.name}' is bfloat16, which ONNX Runtime's Python API "
                              "takes and returns as no numpy array")
    return session


def run(session, feeds, outputs):
    return session.run(outputs, feeds)
