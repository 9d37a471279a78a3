"""MetaOp's adapter worker for frameworks used from Python (ONNX Runtime, OpenVINO, TVM, OpenCV 5).

MetaOp starts it with the project's Python (.venv/bin/python, made by scripts/install-deps.sh) as

    python metaop_adapter.py ADAPTER.py

with one end of a socket pair on fd 3, for requests and replies (stdout and stderr stay free for
the framework's own logging). The protocol is the one of src/bindings/onnx_import/adapter_process.h.
ADAPTER.py is a framework's adapter module; it defines

    FRAMEWORK: str                  the framework's name, for messages
    LEVELS: list[str]               optimization levels, lowest first
    version() -> str
    load(model: bytes, level: int, threads: int) -> session
    run(session, feeds: dict[str, numpy.ndarray], outputs: list[str]) -> list[numpy.ndarray]

and raises this module's Unsupported when the framework refuses a model (no kernel, a type or an
attribute it lacks): MetaOp reports that as a coverage gap, not as a failure.
"""

import importlib.util
import socket
import struct
import sys

import numpy as np


class Unsupported(Exception):
    """The framework refuses the model (MetaOp's Unsupported)."""


# ONNX element types and numpy's.
ELEM_TYPES = {
    1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
    7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64,
}
try:  # bfloat16 has no numpy type of its own; ml_dtypes (an onnx dependency) gives one
    import ml_dtypes

    ELEM_TYPES[16] = ml_dtypes.bfloat16
except ImportError:
    pass
ELEM_OF = {np.dtype(t): k for k, t in ELEM_TYPES.items()}

SOCKET_FD = 3


def recv_exactly(sock, n):
    """n bytes, or None when MetaOp closed its end."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            return None
        got += k
    return buf


class Reader:
    def __init__(self, body):
        self.body = body
        self.pos = 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.body, self.pos)
        self.pos += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("<I")
        s = bytes(self.body[self.pos:self.pos + n]).decode("utf-8")
        self.pos += n
        return s

    def tensor(self):
        name = self.string()
        elem = self.take("<B")
        rank = self.take("<I")
        dims = [self.take("<q") for _ in range(rank)]
        nbytes = self.take("<Q")
        self.pos = (self.pos + 7) & ~7
        if elem not in ELEM_TYPES:
            raise Unsupported(f"input '{name}': ONNX element type {elem} has no numpy type here")
        dtype = np.dtype(ELEM_TYPES[elem])
        a = np.frombuffer(self.body, dtype=dtype, count=nbytes // dtype.itemsize, offset=self.pos)
        self.pos += nbytes
        return name, a.reshape(dims)


class Writer:
    """A reply body: small header pieces and the arrays' own bytes (no copy of the data)."""

    def __init__(self):
        self.parts = []
        self.length = 0

    def put(self, b):
        self.parts.append(b)
        self.length += len(b)

    def pack(self, fmt, *v):
        self.put(struct.pack(fmt, *v))

    def string(self, s):
        b = s.encode("utf-8")
        self.pack("<I", len(b))
        self.put(b)

    def tensor(self, name, a):
        a = np.asarray(a)
        if not a.flags["C_CONTIGUOUS"]:  # (np.ascontiguousarray would make a scalar 1-d)
            a = a.copy(order="C")
        elem = ELEM_OF.get(a.dtype)
        if elem is None:
            raise Unsupported(f"output '{name}' has type {a.dtype}, which MetaOp has no tensors of")
        self.string(name)
        self.pack("<B", elem)
        self.pack("<I", a.ndim)
        for d in a.shape:
            self.pack("<q", d)
        self.pack("<Q", a.nbytes)
        pad = (8 - self.length % 8) % 8
        if pad:
            self.put(bytes(pad))
        if a.nbytes:  # as bytes: the buffer protocol knows no bfloat16
            self.put(memoryview(a.reshape(-1).view(np.uint8)))

    def send(self, sock):
        sock.sendall(struct.pack("<I", self.length))
        for p in self.parts:
            sock.sendall(p)


def reply_error(sock, kind, message):
    w = Writer()
    w.put(kind)
    w.string(message[-4000:])
    w.send(sock)


def load_adapter(path):
    # The adapter's `from metaop_adapter import Unsupported` must get this module's class.
    sys.modules.setdefault("metaop_adapter", sys.modules[__name__])
    spec = importlib.util.spec_from_file_location("metaop_framework_adapter", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serve(adapter, sock):
    sessions = {}
    while True:
        head = recv_exactly(sock, 4)
        if head is None:
            return
        body = recv_exactly(sock, struct.unpack("<I", head)[0])
        if body is None:
            return
        r = Reader(body)
        kind = bytes(body[:1])
        r.pos = 1
        try:
            w = Writer()
            w.put(b"O")
            if kind == b"L":
                sid, level, threads = r.take("<I"), r.take("<B"), r.take("<I")
                sessions[sid] = adapter.load(bytes(body[r.pos:]), level, threads)
            elif kind == b"R":
                sid = r.take("<I")
                feeds = dict(r.tensor() for _ in range(r.take("<I")))
                names = [r.string() for _ in range(r.take("<I"))]
                got = adapter.run(sessions[sid], feeds, names)
                if len(got) != len(names):
                    raise RuntimeError(f"{len(got)} outputs for {len(names)} requested")
                w.pack("<I", len(names))
                for name, a in zip(names, got):
                    w.tensor(name, a)
            elif kind == b"F":
                sessions.pop(r.take("<I"), None)
            elif kind == b"V":
                w.string(f"{adapter.FRAMEWORK} {adapter.version()}; Python "
                         f"{sys.version.split()[0]}; numpy {np.__version__}")
            else:
                raise RuntimeError(f"unknown request {kind!r}")
        except Unsupported as e:
            reply_error(sock, b"U", str(e) or type(e).__name__)
            continue
        except Exception as e:  # the framework failed: MetaOp's Error, with its message
            reply_error(sock, b"E", f"{type(e).__name__}: {e}")
            continue
        w.send(sock)


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: metaop_adapter.py ADAPTER.py (started by MetaOp, socket on fd 3)\n")
        return 2
    try:
        adapter = load_adapter(sys.argv[1])
    except Exception as e:
        sys.stderr.write(f"metaop_adapter: cannot load the adapter {sys.argv[1]}: "
                         f"{type(e).__name__}: {e}\n")
        return 3
    sock = socket.socket(fileno=SOCKET_FD)
    try:
        serve(adapter, sock)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
