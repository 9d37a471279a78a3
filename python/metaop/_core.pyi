"""Type stubs of the extension module (src/python/module.cpp)."""
from typing import Any, Callable, Mapping, Sequence

import numpy as np

version: str

class Outcome:
    exit_code: int
    out: str
    err: str
    outputs: dict[str, np.ndarray]
    failure_kind: str
    failure: str

def command(args: Sequence[str], arrays: Mapping[str, np.ndarray] = ..., outputs: bool = ...,
            progress: Callable[[str, float], Any] | None = ...) -> Outcome: ...
def thresholds() -> dict[str, float]: ...
def symptom_kinds() -> list[str]: ...
