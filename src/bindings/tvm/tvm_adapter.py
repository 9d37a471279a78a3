"""TVM adapter for MetaOp's `tvm` binding: Apache TVM's Relax ONNX frontend
(`tvm.relax.frontend.onnx.from_onnx`) imports the model with its parameters as constants, the
"zero" pipeline that TVM's tutorials apply before compiling (LegalizeOps, FoldConstant, FuseOps,
FuseTIR) lowers it, `tvm.compile` builds it for the CPU (target "llvm") and the Relax VM runs it.

Levels are PassContext opt_level values. Of the passes these steps run, only FuseOps reads
opt_level, and only to tell 0 from the rest: at 0 every op is its own TIR function, from 1 on
element-wise and injective ops are fused into their producer (Conv+Add+Relu). Levels 1 to 3
build the same machine code, so two levels remain: "O0", and "O2", PassContext's default, which
users get. Fusion leaves float32 and float16 results bit for bit the same; in bfloat16 it moves
roundings, since TVM computes bfloat16 in float32 and rounds what a TIR function stores, so a
fused intermediate is no longer rounded to bfloat16.

Runs under the project's Python environment (`.venv/bin/python`: apache-tvm 0.27, onnx).
"""

import os
import re
import warnings

import numpy as np
import onnx
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

from metaop_adapter import Unsupported

FRAMEWORK = "TVM"
LEVELS = ["O0", "O2"]
FIRST_FUSING_LEVEL = 1
_OPT_LEVEL = [0, 2]  # PassContext opt_level of each level

# Plain "llvm", as TVM's tutorials compile for the CPU: generic x86-64 code, no -mcpu.
_TARGET = tvm.target.Target("llvm")
_DEVICE = tvm.cpu()
_SAYS_UNSUPPORTED = re.compile(r"\bunsupported\b|not supported|not implemented", re.IGNORECASE)
_threads = None


def version() -> str:
    return tvm.__version__


def _set_threads(threads: int):
    # TVM's thread pool takes its size from TVM_NUM_THREADS when it starts (half the hardware
    # threads without it) and config_threadpool resizes it, but never above its first size: the
    # first load() decides. The default pipeline schedules no parallel loops on the CPU, so the
    # kernels run on the calling thread whatever the setting.
    global _threads
    if threads != _threads:
        os.environ["TVM_NUM_THREADS"] = str(threads)
        tvm.get_global_func("runtime.config_threadpool")(1, threads)
        _threads = threads


def _short(e: Exception) -> str:
    # TVM's messages end with the error after a C++ and Python traceback.
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[-1] if lines else ''}"[:300]


class _Session:
    def __init__(self, vm, inputs, outputs):
        self.vm = vm
        self.inputs = inputs  # graph-input names, in the order of main's parameters
        self.outputs = outputs  # graph-output names, in the order main returns them


def load(model: bytes, level: int, threads: int):
    _set_threads(threads)
    proto = onnx.load_from_string(model)
    initializers = {t.name for t in proto.graph.initializer}
    inputs = [i.name for i in proto.graph.input if i.name not in initializers]
    outputs = [o.name for o in proto.graph.output]
    try:
        with warnings.catch_warnings():
            # The frontend runs ONNX's checker and only warns; MetaOp checks models itself.
            warnings.simplefilter("ignore")
            mod = from_onnx(proto)
    except Exception as e:
        raise Unsupported(f"ONNX frontend: {_short(e)}") from e
    # A model the frontend imported but TVM cannot build is a failure of TVM's (an internal
    # check, an assertion) unless TVM itself says it does not support something.
    with tvm.transform.PassContext(opt_level=_OPT_LEVEL[level]):
        try:
            mod = relax.get_pipeline("zero")(mod)
            ex = tvm.compile(mod, _TARGET)
        except Exception as e:
            if isinstance(e, NotImplementedError) or _SAYS_UNSUPPORTED.search(str(e)):
                raise Unsupported(f"compile: {_short(e)}") from e
            raise
    return _Session(relax.VirtualMachine(ex, _DEVICE), inputs, outputs)


def run(session, feeds: dict, outputs: list) -> list:
    # np.require keeps a 0-d array 0-d (np.ascontiguousarray makes it 1-d, which the VM refuses).
    args = [tvm.runtime.tensor(np.require(feeds[n], requirements="C"), _DEVICE)
            for n in session.inputs]
    result = session.vm["main"](*args)
    if len(session.outputs) == 1:
        result = [result]
    by_name = dict(zip(session.outputs, result))
    return [_to_numpy(by_name[n]) for n in outputs]


def _to_numpy(value):
    # A shape known at compile time (Shape's output) comes back as the VM's shape tuple, whose
    # values TVM holds as int64, ONNX's dtype for them.
    if isinstance(value, tvm_ffi.Shape):
        return np.array(list(value), dtype=np.int64)
    return value.numpy()
