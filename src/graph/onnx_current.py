"""ONNX's checker, shape inference and schema defaults for models of opsets newer than the ONNX
library MetaOp links (Debian's ONNX 1.12 knows opsets up to 17): the current `onnx` package of
the project's Python environment (`.venv/bin/python`, scripts/install-deps.sh) does them.

MetaOp starts it as `python -s onnx_current.py` with one end of a socket pair on fd 3, and sends
the requests of its own ONNX worker (src/graph/onnx_import.cpp, OnnxWorker), framed as u64
length + bytes:

    request: u8 run_checker, u8 infer_shapes, u32 n, the model's path (n bytes; may be empty),
             the model's bytes
    reply:   'O' + a GraphProto holding the inferred value_info, the outputs' types and every
             node with the attributes its schema defaults and the node leaves out filled in
             (in the graph's order); or 'E' + ": message" (one line; MetaOp puts the model's
             name in front)
"""

import socket
import struct
import sys

import onnx
from onnx import defs


def one_line(e):
    return " ".join(str(e).split())


def fill_defaults(graph, opsets):
    """Every node's left-out attributes that have a schema default, subgraphs included."""
    for node in graph.node:
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        version = opsets.get(domain)
        if version is not None:
            try:
                schema = defs.get_schema(node.op_type, version, domain)
            except Exception:  # an op the checker was not asked to vet: left as it is
                schema = None
            if schema is not None:
                have = {a.name for a in node.attribute}
                for name, attr in sorted(schema.attributes.items()):
                    d = attr.default_value
                    if name in have or attr.required or d.type == onnx.AttributeProto.UNDEFINED:
                        continue
                    a = node.attribute.add()
                    a.CopyFrom(d)
                    a.name = name
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                fill_defaults(a.g, opsets)
            for g in a.graphs:
                fill_defaults(g, opsets)


def has_elem_type(t):
    return t.HasField("tensor_type") and t.tensor_type.elem_type != 0


def type_outputs_node_by_node(model):
    """Graph outputs the model-level inference left untyped: some ops (GroupNormalization-21, a
    context-dependent function) have no inference function of their own, but ONNX infers a
    node's outputs from its schema with infer_node_outputs."""
    graph = model.graph
    if all(has_elem_type(o.type) for o in graph.output):
        return
    types = {v.name: v.type for v in list(graph.input) + list(graph.value_info)}
    for t in graph.initializer:
        types.setdefault(t.name, onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    for node in graph.node:
        if all(o in types and has_elem_type(types[o]) for o in node.output if o):
            continue
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        try:
            schema = defs.get_schema(node.op_type, opsets[domain], domain)
            got = onnx.shape_inference.infer_node_outputs(
                schema, node, {i: types[i] for i in node.input if i in types},
                opset_imports=list(model.opset_import))
        except Exception:
            continue
        types.update(got)
    for o in graph.output:
        if not has_elem_type(o.type) and o.name in types:
            o.type.CopyFrom(types[o.name])


def answer(request):
    run_checker, infer_shapes = request[0] != 0, request[1] != 0
    (n,) = struct.unpack_from("<I", request, 2)
    path = bytes(request[6:6 + n]).decode("utf-8", "surrogateescape")
    model = onnx.ModelProto.FromString(bytes(request[6 + n:]))
    if run_checker:
        external = any(t.data_location == onnx.TensorProto.EXTERNAL
                       for t in model.graph.initializer)
        try:
            # The checker finds external data next to the model only when given its path.
            onnx.checker.check_model(path if external and path else model)
        except Exception as e:
            return b"E: the ONNX checker rejects the model: " + one_line(e).encode()
    if infer_shapes:
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception as e:
            return b"E: ONNX shape inference fails: " + one_line(e).encode()
        type_outputs_node_by_node(model)
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    fill_defaults(model.graph, opsets)
    out = onnx.GraphProto()
    out.value_info.extend(model.graph.value_info)
    out.output.extend(model.graph.output)
    out.node.extend(model.graph.node)
    return b"O" + out.SerializeToString()


def recv_exactly(sock, n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            return None
        got += k
    return buf


def main():
    sock = socket.socket(fileno=3)
    while True:
        head = recv_exactly(sock, 8)
        if head is None:
            return 0
        body = recv_exactly(sock, struct.unpack("<Q", head)[0])
        if body is None:
            return 0
        try:
            reply = answer(body)
        except Exception as e:  # a model the package cannot read: an error about the model
            reply = b"E: the current ONNX package cannot read the model: " + one_line(e).encode()
        sock.sendall(struct.pack("<Q", len(reply)) + reply)


if __name__ == "__main__":
    sys.exit(main())
