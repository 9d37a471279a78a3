"""The Python API's tests (ctest python_api; the project's Python environment, .venv/bin/python):
the package is imported from the build tree (PYTHONPATH=BUILD/python), the metaop executable
named by METAOP_BIN is the command line the results are compared with."""
import os
import pathlib

import pytest

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE.parent / "data"


@pytest.fixture(scope="session")
def metaop_bin() -> str:
    path = os.environ.get("METAOP_BIN")
    if not path or not os.path.exists(path):
        pytest.fail("METAOP_BIN must name the metaop executable of this build")
    return path


@pytest.fixture(scope="session")
def data() -> pathlib.Path:
    return DATA
