"""OpenVINO adapter for MetaOp's `openvino` binding: the OpenVINO CPU plugin as its users run it.

The serialized ONNX model goes through OpenVINO's own ONNX frontend (`Core.read_model`) and is
compiled for "CPU" (`Core.compile_model`) with the plugin's graph transformations; nothing is
rewritten here. One node and a whole model take the same path.

Levels are the CPU plugin's inference precisions (`INFERENCE_PRECISION_HINT`):
- "f32": float32 kernels for float32 models. float16 models are computed in float32 too, and
  so are float64 models: their inputs are converted to float32 with saturation (an infinity
  becomes +-3.4e38, so IsInf says false) and float64 is never computed in float64.
- "bf16": OpenVINO's default on a CPU with bfloat16 instructions (avx512_bf16 or AMX), what
  users get without a hint: matrix products, convolutions and the other ops the plugin chooses
  run on bfloat16 operands although the model says float32 (or float16, or float64); inputs
  and outputs keep the model's dtypes. On a CPU without them OpenVINO's default is f32, and
  this level is refused.
The CPU plugin fuses Conv/MatMul with a following activation (and a residual Add) at every
level: its graph optimizer has no switch for it, hence FIRST_FUSING_LEVEL = 0. It also computes
int64 in int32 (2**31 - 1 + 1 wraps to -2**31); outputs keep the model's dtypes.

bfloat16 arrays are ml_dtypes.bfloat16 on both sides: OpenVINO's Python API would read such an
array as float16, so their bits go through ov.Tensor objects of type bf16.

Run under the project's Python environment (`.venv/bin/python`), which has `openvino`.
"""

import re

import ml_dtypes
import numpy as np
import onnx
import openvino as ov

from metaop_adapter import Unsupported

FRAMEWORK = "OpenVINO"
LEVELS = ["f32", "bf16"]
FIRST_FUSING_LEVEL = 0

_PRECISIONS = {"f32": ov.Type.f32, "bf16": ov.Type.bf16}
_core = None  # one Core per process: creating it loads the plugin registry (tens of ms)


def _the_core():
    global _core
    if _core is None:
        _core = ov.Core()
    return _core


def version() -> str:
    return ov.get_version().split("-")[0]


def load(model: bytes, level: int, threads: int):
    core = _the_core()
    precision = LEVELS[level]
    if precision == "bf16" and "BF16" not in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        raise Unsupported("this CPU has no bfloat16 instructions: OpenVINO's default here is f32")
    try:
        # The ONNX frontend: an op, attribute or dtype it cannot convert fails here.
        ov_model = core.read_model(model)
    except RuntimeError as e:
        raise Unsupported(_short(e)) from None
    config = {
        "INFERENCE_PRECISION_HINT": _PRECISIONS[precision],
        "INFERENCE_NUM_THREADS": int(threads),  # 0: OpenVINO chooses
    }
    try:
        compiled = core.compile_model(ov_model, "CPU", config)
    except RuntimeError as e:
        # The CPU plugin refuses a node it has no implementation for (a type, a dtype, an
        # attribute value, a dynamic rank) while it builds its graph.
        raise Unsupported(_short(e)) from None
    return _Session(compiled, _graph_io(model))


def run(session, feeds: dict, outputs: list) -> list:
    return session.run(feeds, outputs)


def _graph_io(model):
    """The ONNX graph's input (without initializers) and output names, in order."""
    graph = onnx.ModelProto.FromString(model).graph
    initializers = {t.name for t in graph.initializer}
    return ([i.name for i in graph.input if i.name not in initializers],
            [o.name for o in graph.output])


class _Session:
    def __init__(self, compiled, graph_io):
        self.compiled = compiled
        self.request = compiled.create_infer_request()
        self.inputs = self._indices(compiled.inputs, graph_io[0])
        self.outputs = self._indices(compiled.outputs, graph_io[1])
        self.n_inputs = len(compiled.inputs)

    @staticmethod
    def _indices(ports, names):
        """ONNX name -> port index. The frontend keeps the graph's order but may drop an input it
        folds away (ReduceSum's empty `axes`, Dropout's `ratio`) or rename one: a graph input
        that goes straight to an output (Dropout, Identity) takes the output's name. A renamed
        one is matched by position among those left when as many are left on both sides."""
        by_name = {n: k for k, p in enumerate(ports) for n in p.get_names()}
        found = {name: by_name[name] for name in names if name in by_name}
        names_left = [n for n in names if n not in found]
        ports_left = [k for k in range(len(ports)) if k not in found.values()]
        if len(names_left) == len(ports_left):
            found.update(zip(names_left, ports_left))
        return found

    def run(self, feeds, outputs):
        # A feed for an input the frontend dropped has nothing to go to: OpenVINO's model does
        # not depend on it. An input left without a value would be read uninitialized
        # (OpenVINO allocates every input and does not check that it was set).
        tensors = {self.inputs[n]: _to_tensor(a) for n, a in feeds.items() if n in self.inputs}
        unfed = [self.compiled.inputs[k].get_any_name()
                 for k in range(self.n_inputs) if k not in tensors]
        if unfed:
            raise RuntimeError(f"OpenVINO's model inputs {unfed} match none of the graph "
                               f"inputs fed ({sorted(feeds)})")
        self.request.infer(tensors)
        return [_from_tensor(self.request.get_output_tensor(self.outputs[name]))
                if name in self.outputs else
                _from_tensor(self.request.get_tensor(self.compiled.output(name)))
                for name in outputs]


def _is_bfloat16(array):
    return array.dtype.name == "bfloat16"


def _to_tensor(array):
    # OpenVINO shares only C-contiguous writeable memory; a read-only array (np.frombuffer) is
    # copied. (np.ascontiguousarray would make a scalar 1-d.)
    array = np.require(array, requirements=["C", "W"])
    if _is_bfloat16(array):
        return ov.Tensor(array.view(np.uint16), ov.Shape(list(array.shape)), ov.Type.bf16)
    # Shared, not copied: infer() is synchronous and every run sets its inputs again.
    return ov.Tensor(array, shared_memory=True)


def _from_tensor(tensor):
    if tensor.element_type == ov.Type.bf16:
        return tensor.data.view(np.uint16).view(ml_dtypes.bfloat16).copy()
    return tensor.data.copy()


def _short(error):
    """The framework's reason in one line, without its source locations and boilerplate."""
    text = " ".join(str(error).split())
    text = re.sub(r"(Exception from|Check '.*?' failed at) src/\S+:\d+:\s*", "", text)
    text = re.sub(r"While validating node '.*?' with friendly_name '.*?':\s*", "", text)
    frontend = re.search(r"-- (\S+) with a message: (?:While validating ONNX node '[^']*': )?"
                         r"(.*?)(?: Summary:|$)", text)
    if frontend:
        return f"ONNX frontend, {frontend.group(1)}: {frontend.group(2)}"[:400]
    no_rule = re.search(r"No conversion rule found for operations: (.*?)(?: To facilitate|$)", text)
    if no_rule:
        return f"ONNX frontend: no conversion rule for {no_rule.group(1)}"
    plugin = re.search(r"Unsupported operation of type: (\S+) .*?Details: (?:Not Implemented: )?"
                       r"(.*?)(?: Not Implemented: Cannot fallback|$)", text)
    if plugin:
        return f"CPU plugin, {plugin.group(1)}: {plugin.group(2)}"[:400]
    return text[:400]
