"""Test double of the ort binding's adapter (METAOP_ADAPTER_ORT): the real adapter, except that a
run whose inputs hold the value 1234.5 kills the worker with SIGSEGV (a crash of ONNX Runtime)
one holding 4321.5 never answers (a hang) and one holding 5555.5 fails with an exception (the
framework failing on a model it accepted)."""

import importlib.util
import os
import signal
import time

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "metaop_real_ort_adapter", os.path.join(_here, "..", "..", "src", "bindings", "ort", "ort_adapter.py"))
_real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_real)

FRAMEWORK = _real.FRAMEWORK
LEVELS = _real.LEVELS
version = _real.version
load = _real.load


def run(session, feeds, outputs):
    for a in feeds.values():
        if a.dtype.kind == "f" and (a == 1234.5).any():
            os.kill(os.getpid(), signal.SIGSEGV)
        if a.dtype.kind == "f" and (a == 5555.5).any():
            raise RuntimeError("planted failure")
        if a.dtype.kind == "f" and (a == 4321.5).any():
            while True:
                time.sleep(1)
    return _real.run(session, feeds, outputs)
