"""OpenCV 5 adapter for MetaOp's `opencv` binding: the model is imported by OpenCV 5's DNN module
with its new graph engine (`cv2.dnn.readNetFromONNX(buffer, cv2.dnn.ENGINE_NEW)`) and run on the
CPU (backend DNN_BACKEND_OPENCV, the only one the new engine has) through the Python API its users
call, `Net.setInput` and `Net.forward`.

The new engine fuses at import (Conv with its activation, batch normalization into Conv, ...)
and has no switch to turn that off: `Net.enableFusion(False)` on an imported net clears the
whole graph (OpenCV 5.0.0), so there is a single level. The classic engine is still in 5.0:
from a file path with `ENGINE_CLASSIC`, and as the fallback of `ENGINE_AUTO` (the default) when
the new engine refuses a model; from a buffer `ENGINE_CLASSIC` acts as `ENGINE_AUTO`. Only
`ENGINE_NEW` never falls back, so that what runs here is always the new engine.
Runs in the project's Python environment (`.venv/bin/python`, opencv-python-headless 5.x).
"""
import os
import re
import sys
import tempfile

import numpy as np

# OpenCV reads this variable once and then uses the engine it names whatever the caller asks
# for (1 would silently run the classic engine under this binding's name).
os.environ.pop("OPENCV_FORCE_DNN_ENGINE", None)

import cv2  # noqa: E402  (after the environment above is settled)
import onnx  # noqa: E402
from metaop_adapter import Unsupported  # noqa: E402

try:  # bfloat16 for numpy (an onnx dependency)
    import ml_dtypes  # noqa: E402
except ImportError:
    ml_dtypes = None

FRAMEWORK = "OpenCV"
LEVELS = ["fusion"]
FIRST_FUSING_LEVEL = 0

# Errors travel in the exceptions; the log would repeat them on stderr, and the engine warns on
# every setPreferableTarget that it has no targets.
cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)


def version() -> str:
    return cv2.__version__


def _message(text: str) -> str:
    """OpenCV's error text on one line, without the C++ signature of the function that threw
    and the build machine's source folder."""
    text = re.sub(r"in function '[^']*'", "", str(text))
    text = re.sub(r"\S*/modules/dnn/src/", "", text)
    return " ".join(text.replace("\n>", " ").split())


def _import_failure(buffer: np.ndarray) -> str:
    """Why the new engine returned an empty net: it says so only in its log, the operations it
    lacks at WARNING level (on stderr) and a node it failed to read at INFO level (on stdout).
    The model is imported again with both captured."""
    logging = cv2.utils.logging
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as log:
        saved = [os.dup(1), os.dup(2)]
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        logging.setLogLevel(logging.LOG_LEVEL_INFO)
        try:
            cv2.dnn.readNetFromONNX(buffer, cv2.dnn.ENGINE_NEW)
        except cv2.error:
            pass
        finally:
            logging.setLogLevel(logging.LOG_LEVEL_SILENT)
            for fd, copy in enumerate(saved, start=1):
                os.dup2(copy, fd)
                os.close(copy)
        log.seek(0)
        text = log.read().decode(errors="replace")
    missing = re.search(r"Unsupported operations:\s*((?:\n\t\S+)+)", text)
    if missing:
        return "OpenCV's new engine has no layer for " + ", ".join(missing.group(1).split())
    node = re.search(r"DNN/ONNX: error '(.*?)' occurred when processing node '[^']*' \((\w+)\)",
                     text, re.S)
    if node:
        return f"OpenCV's ONNX importer refuses its {node.group(2)}: {_message(node.group(1))}"
    return "OpenCV's ONNX importer returned an empty net"


def _declared_outputs(model: bytes) -> tuple:
    """The graph outputs the model declares 0-d (a shape with no dimension), and those it
    declares bfloat16."""
    graph = onnx.ModelProto.FromString(model).graph
    tensors = [o for o in graph.output if o.type.HasField("tensor_type")]
    scalars = {o.name for o in tensors if o.type.tensor_type.HasField("shape")
               and len(o.type.tensor_type.shape.dim) == 0}
    bf16 = {o.name for o in tensors if o.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16}
    return scalars, bf16


def _as_declared(name: str, value: np.ndarray, declared: tuple) -> np.ndarray:
    """OpenCV has no 0-d Mat: a 0-d result (Size, a reduced loss) comes back as shape [1]. An
    output the model declares 0-d that comes back as one element is given shape [], its value
    untouched (what OpenCV 4.6's binding does with the shape ONNX infers); any other shape is
    passed on as OpenCV returned it. A bfloat16 output comes back as uint16 (numpy has no
    bfloat16; cv2 hands a bfloat16 Mat's bits so, as it takes a bfloat16 input's): read as the
    bfloat16 the model declares."""
    scalars, bf16 = declared
    if name in scalars and value.shape == (1,):
        value = value.reshape(())
    if name in bf16 and value.dtype == np.uint16 and ml_dtypes is not None:
        value = value.view(ml_dtypes.bfloat16)
    return value


def _truncating_dft(model: bytes) -> str:
    """A DFT node whose dft_length is below its signal's length, where OpenCV 5.0 writes past a
    heap block (valgrind, with cv2 alone: bench/signal/opencv_dft_truncate.py); what it corrupts
    crashes later kernels of the same process, so such a node is declined, not run."""
    graph = onnx.ModelProto.FromString(model).graph
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in graph.input}
    dims.update({name: list(value.shape) for name, value in consts.items()})
    for node in graph.node:
        if node.op_type != "DFT" or len(node.input) < 2 or node.input[1] not in consts:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), None)
        if len(node.input) > 2 and node.input[2] in consts:
            axis = int(consts[node.input[2]])
        shape = dims.get(node.input[0], [])
        axis = (-2 if axis is None else axis) % max(len(shape), 1)
        length = int(consts[node.input[1]])
        if shape and 0 < length < shape[axis]:
            return (f"OpenCV 5.0's DFT writes past a heap block when dft_length ({length}) is below "
                    f"the signal's length ({shape[axis]}): declined, so that the memory it "
                    "corrupts cannot crash later kernels")
    return ""


def load(model: bytes, level: int, threads: int):
    if not 0 <= level < len(LEVELS):
        raise ValueError(f"OpenCV has no level {level} (levels: {LEVELS})")
    if reason := _truncating_dft(model):
        raise Unsupported(reason)
    # A process-wide setting in OpenCV (its own thread pool), read when a layer runs.
    cv2.setNumThreads(threads)
    # A Python `bytes` object given to readNetFromONNX crashes the process (5.0.0): the buffer
    # overload wants a uint8 array.
    buffer = np.frombuffer(model, dtype=np.uint8)
    try:
        net = cv2.dnn.readNetFromONNX(buffer, cv2.dnn.ENGINE_NEW)
    except cv2.error as e:
        raise Unsupported(f"OpenCV's ONNX importer refuses it: {_message(e)}") from None
    if net.empty():
        raise Unsupported(_import_failure(buffer))
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
    return net, threads, list(net.getUnconnectedOutLayersNames()), _declared_outputs(model)


def _as_fed(name: str, value: np.ndarray) -> np.ndarray:
    if value.ndim == 0:
        raise Unsupported(f"OpenCV's Python API cannot feed the 0-d input '{name}'")
    # numpy has no bfloat16: ONNX's comes as ml_dtypes.bfloat16, which cv2 refuses; cv2 takes
    # the same bits as uint16 for a bfloat16 graph input (a view: no value changes).
    if value.dtype.name == "bfloat16":
        return value.view(np.uint16)
    return value


def run(session, feeds: dict, outputs: list) -> list:
    net, threads, graph_outputs, declared = session
    missing = [o for o in outputs if o not in graph_outputs]
    if missing:
        raise Unsupported(f"OpenCV returns graph outputs only, not {', '.join(missing)}")
    cv2.setNumThreads(threads)  # the setting is global: another session may have changed it
    # cv2 turns an int64 array into an int32 Mat (values beyond its range wrap; 5.0.0): left as
    # OpenCV's Python users get it, so that MetaOp sees what they would.
    try:
        for name, value in feeds.items():
            net.setInput(_as_fed(name, np.ascontiguousarray(value)), name)
        # The new engine computes every graph output or none (asking for some is an error).
        results = dict(zip(graph_outputs, net.forward(graph_outputs)))
    except cv2.error as e:
        # The new engine infers shapes and checks attributes when it first runs, so a node it
        # cannot run is often refused here rather than at import.
        raise Unsupported(f"OpenCV refuses to run it: {_message(e)}") from None
    for name in outputs:
        if results[name] is None:  # cv2 makes an empty Mat None: a 0-element output's shape is lost
            raise Unsupported(f"OpenCV's Python API returns no array for the empty output '{name}'")
    return [_as_declared(name, results[name], declared) for name in outputs]
