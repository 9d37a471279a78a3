#!/usr/bin/env python3
"""FRAMEWORK alone on this reproducer folder (no MetaOp): runs model.onnx on the folder's inputs
(PyTorch: the node in repro.json, `onnx_node`, as the eager calls MetaOp's torch binding makes)
and prints, per output, the framework's value, the exact value (MetaOp's float64 reference,
rounded once to the output's dtype) and the error in ULPs at the worst element, with how many
elements are off by more than 4 ULPs or non-finite on one side only. Exit 1 when the framework
still gives, at that element, the value the finding recorded (the finding reproduces), 0 when
it no longer does, 2 when the framework cannot run the model (1 for a crash finding when it
fails the way the finding recorded).

Needs numpy and the framework's Python package (PIP); nothing else. Usage:
  python3 reproduce_BINDING.py
"""
import json
import os
import sys

import numpy as np

FRAMEWORK = "%FRAMEWORK%"  # written by MetaOp: onnxruntime, openvino, tvm, opencv or torch
HERE = os.path.dirname(os.path.abspath(__file__))
# The level the finding was made at (repro.json `level`: --ort-opt, --openvino-precision,
# --tvm-opt), the framework's default when it names none.
LEVEL = None


def run_onnxruntime(path, feeds, names):
    import onnxruntime as ort
    options = ort.SessionOptions()
    levels = {"disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
              "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    options.graph_optimization_level = levels[LEVEL or "all"]
    options.intra_op_num_threads = 1  # as MetaOp's binding runs it: sums split over threads differ
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return f"onnxruntime {ort.__version__}", session.run(names, feeds)


def run_openvino(path, feeds, names):
    import openvino as ov
    compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": LEVEL or "f32"})
    port = {n: p for p in compiled.inputs for n in p.get_names()}
    result = compiled({port[k]: v for k, v in feeds.items() if k in port})
    by_name = {n: result[p] for p in compiled.outputs for n in p.get_names()}
    return f"openvino {ov.__version__}", [by_name[n] for n in names]


def run_tvm(path, feeds, names):
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    with tvm.transform.PassContext(opt_level=0 if LEVEL == "O0" else 2):
        mod = relax.get_pipeline("zero")(from_onnx(onnx.load(path)))
        vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(np.require(v, requirements="C")) for v in feeds.values()])
    out = [out] if len(names) == 1 else list(out)
    return f"tvm {tvm.__version__}", [o.numpy() for o in out]


def run_opencv(path, feeds, names):
    import cv2
    net = cv2.dnn.readNetFromONNX(np.fromfile(path, dtype=np.uint8), cv2.dnn.ENGINE_NEW)
    for name, value in feeds.items():
        net.setInput(value, name)
    return f"opencv {cv2.__version__} (new engine)", list(net.forward(names))


def torch_ops():
    """PyTorch eager calls for the ONNX ops, as MetaOp's torch binding makes them through ATen
    (src/bindings/torch): op -> f(attributes, inputs as tensors or None, opset) -> outputs."""
    import torch
    F = torch.nn.functional

    def unary(f):
        return lambda a, x, opset: [f(x[0])]

    def binary(f):
        return lambda a, x, opset: [f(x[0], x[1])]

    def variadic(f, mean=False):
        def run(a, x, opset):
            acc = x[0]
            for y in x[1:]:
                acc = f(acc, y)
            return [acc / len(x) if mean else acc.clone() if len(x) == 1 else acc]
        return run

    def axis(v, rank):
        return v + rank if v < 0 else v

    def reduction(f):
        def run(a, x, opset):
            t = x[0]
            # The axes are an input from opset 18 on (ReduceSum: 13), an attribute before.
            from_input = opset >= (13 if a.get("_op") == "ReduceSum" else 18)
            axes = (x[1].tolist() if len(x) > 1 and x[1] is not None else []) if from_input \
                else list(a.get("axes", []))
            keep = bool(a.get("keepdims", 1))
            if not axes and a.get("noop_with_empty_axes", 0):
                return [t]
            axes = [axis(v, t.dim()) for v in axes] or list(range(t.dim()))
            return [f(t, axes, keep)]
        return run

    def prod(t, axes, keep):
        for d in sorted(axes, reverse=True):
            t = torch.prod(t, d, keep)
        return t

    def softmax_like(kind):
        def run(a, x, opset):
            t = x[0]
            coerce = opset < 13
            ax = axis(a.get("axis", 1 if coerce else -1), t.dim())
            outer = int(torch.tensor(t.shape[:ax]).prod()) if ax else 1
            n = int(torch.tensor(t.shape[ax:] if coerce else t.shape[ax:ax + 1]).prod())
            t3 = t.reshape(outer, n, -1)
            y = torch.softmax(t3, 1) if kind == 0 else torch.log_softmax(t3, 1)
            return [y.reshape(t.shape)]
        return run

    def clip(a, x, opset):
        t = x[0]
        big = torch.finfo(t.dtype).max if t.dtype.is_floating_point else float("inf")
        lo, hi = -big, big
        if opset < 11:
            lo, hi = a.get("min", lo), a.get("max", hi)
        else:
            lo = float(x[1]) if len(x) > 1 and x[1] is not None else lo
            hi = float(x[2]) if len(x) > 2 and x[2] is not None else hi
        lo = None if lo == float("-inf") else lo
        hi = None if hi == float("inf") else hi
        return [t.clone() if lo is None and hi is None else torch.clamp(t, lo, hi).to(t.dtype)]

    def gemm(a, x, opset):
        A = x[0].t() if a.get("transA", 0) else x[0]
        B = x[1].t() if a.get("transB", 0) else x[1]
        y = torch.matmul(A, B)
        alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
        if alpha != 1.0:
            y = y * alpha
        if len(x) > 2 and x[2] is not None:
            y = y + x[2] * beta if beta != 1.0 else y + x[2]
        return [y]

    def topk(a, x, opset):
        k = int(x[1].reshape(-1)[0]) if opset >= 10 else a["k"]
        v, i = torch.topk(x[0], k, axis(a.get("axis", -1), x[0].dim()), bool(a.get("largest", 1)),
                          True)
        return [v, i]

    def layer_norm(a, x, opset):
        t = x[0]
        ax = axis(a.get("axis", -1), t.dim())
        shape = list(t.shape[ax:])
        w = x[1].expand(shape).contiguous()
        b = x[2].expand(shape).contiguous() if len(x) > 2 and x[2] is not None else None
        y, mean, rstd = torch.ops.aten.native_layer_norm(t, shape, w, b, a.get("epsilon", 1e-5))
        stat = list(t.shape[:ax]) + [1] * (t.dim() - ax)
        return [y, mean.reshape(stat), rstd.reshape(stat)]

    def selu(a, x, opset):
        alpha, gamma = 1.67326319217681884765625, 1.05070102214813232421875  # ATen's selu
        al, g = a.get("alpha", alpha), a.get("gamma", gamma)
        if al == alpha and g == gamma:
            return [torch.selu(x[0])]
        return [torch.ops.aten.elu(x[0], al, g)]

    def dft(a, x, opset):
        t = x[0]
        r = t.dim() - 1
        given = len(x) > 2 and x[2] is not None
        ax = (int(x[2].reshape(-1)[0]) if given else -2) if opset >= 20 else a.get("axis", 1)
        ax = ax + r + 1 if ax < 0 else ax
        inverse, onesided = bool(a.get("inverse", 0)), bool(a.get("onesided", 0))
        n = int(x[1].reshape(-1)[0]) if len(x) > 1 and x[1] is not None else \
            2 * (t.shape[ax] - 1) if inverse and onesided else t.shape[ax]
        sig = torch.view_as_complex(t.contiguous()) if t.shape[-1] == 2 else t[..., 0]
        if inverse and onesided:
            return [torch.fft.irfft(sig, n, ax).unsqueeze(-1)]
        y = torch.fft.rfft(sig, n, ax) if onesided else \
            (torch.fft.ifft if inverse else torch.fft.fft)(sig, n, ax)
        return [torch.view_as_real(y).contiguous()]

    def grid_sample(a, x, opset):
        mode = {"linear": "bilinear", "cubic": "bicubic"}.get(a.get("mode", "bilinear"),
                                                              a.get("mode", "bilinear"))
        return [F.grid_sample(x[0], x[1].to(x[0].dtype), mode=mode,
                              padding_mode=a.get("padding_mode", "zeros"),
                              align_corners=bool(a.get("align_corners", 0)))]

    def given(x, i):
        return len(x) > i and x[i] is not None

    def stft(a, x, opset):
        t = x[0]
        cplx = t.dim() == 3 and t.shape[2] == 2
        sig = torch.view_as_complex(t.contiguous()) if cplx else t[..., 0] if t.dim() == 3 else t
        step = int(x[1].reshape(-1)[0])
        frame = int(x[3].reshape(-1)[0]) if given(x, 3) else \
            x[2].shape[0] if given(x, 2) else t.shape[1]
        window = x[2] if given(x, 2) else torch.ones(frame, dtype=t.dtype)
        y = torch.stft(sig, frame, step, frame, window, center=False, normalized=False,
                       onesided=bool(a.get("onesided", 1)), return_complex=True)
        return [torch.view_as_real(y.transpose(1, 2)).contiguous()]

    def attention(a, x, opset):
        # As MetaOp's torch binding: heads split, the cache concatenated, grouped-query heads
        # repeated, is_causal a mask with the frontier i + past.
        if a.get("softcap", 0.0) != 0:
            raise NotImplementedError("softcap: scaled_dot_product_attention has none")
        q, k, v = x[0], x[1], x[2]
        three_d = q.dim() == 3
        if three_d:
            def heads(t, h):
                return t.reshape(t.shape[0], t.shape[1], h, t.shape[2] // h).transpose(1, 2)
            q, k, v = heads(q, a["q_num_heads"]), heads(k, a["kv_num_heads"]), \
                heads(v, a["kv_num_heads"])
        past = x[4].shape[2] if given(x, 4) else 0
        if given(x, 4):
            k, v = torch.cat([x[4], k], 2), torch.cat([x[5], v], 2)
        hq, hkv, sq, t = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
        mask = x[3] if given(x, 3) else None
        if a.get("is_causal", 0):
            allowed = torch.ones(sq, t, dtype=torch.bool).tril(past)
            mask = allowed if mask is None else torch.logical_and(mask, allowed) \
                if mask.dtype == torch.bool else torch.where(allowed, mask, -float("inf"))
        if mask is not None and mask.dtype != torch.bool:
            mask = mask.to(q.dtype)
        kk = k if hq == hkv else torch.repeat_interleave(k, hq // hkv, 1)
        vv = v if hq == hkv else torch.repeat_interleave(v, hq // hkv, 1)
        y = F.scaled_dot_product_attention(q, kk, vv, mask, 0.0, False, scale=a.get("scale"))
        if three_d:
            y = y.transpose(1, 2).reshape(y.shape[0], sq, hq * y.shape[3])
        return [y.contiguous(), k.contiguous(), v.contiguous()]

    def recurrent(a, x, opset):
        # As MetaOp's torch binding: ONNX's gate blocks reordered into ATen's, B split, a
        # reverse node run on the time-flipped sequence.
        op = a["_op"]
        gates, order = {"LSTM": (4, [0, 2, 3, 1]), "GRU": (3, [1, 0, 2]), "RNN": (1, [0])}[op]
        h = a["hidden_size"]
        layout1, direction = bool(a.get("layout", 0)), a.get("direction", "forward")
        both, time = direction == "bidirectional", 1 if layout1 else 0
        dirs = 2 if both else 1
        acts = a.get("activations") or []
        relu = op == "RNN" and bool(acts) and acts[0] == "Relu"
        xs = x[0]

        def blocks(w):
            return torch.cat([w[i * h:(i + 1) * h] for i in order], 0)
        params = []
        for d in range(dirs):
            params += [blocks(x[1][d]), blocks(x[2][d])]
            if given(x, 3):
                params += [blocks(x[3][d][:gates * h]), blocks(x[3][d][gates * h:])]
        batch = xs.shape[0 if layout1 else 1]

        def state(i):
            if not given(x, i):
                return torch.zeros(dirs, batch, h, dtype=xs.dtype)
            return x[i].permute(1, 0, 2).contiguous() if layout1 else x[i]
        if direction == "reverse":
            xs = torch.flip(xs, [time])
        args = (params, given(x, 3), 1, 0.0, False, both, layout1)
        if op == "LSTM":
            y, hy, cy = torch.lstm(xs, (state(5), state(6)), *args)
        else:
            y, hy = (torch.gru if op == "GRU" else torch.rnn_relu if relu else torch.rnn_tanh)(
                xs, state(5), *args)
        if direction == "reverse":
            y = torch.flip(y, [time])
        y = y.reshape(batch, y.shape[1], dirs, h).contiguous() if layout1 else \
            y.reshape(y.shape[0], batch, dirs, h).permute(0, 2, 1, 3).contiguous()
        out = [y] + [s.permute(1, 0, 2).contiguous() if layout1 else s.contiguous()
                     for s in ([hy, cy] if op == "LSTM" else [hy])]
        return out

    def quant_args(a, x):
        # As MetaOp's torch binding: a scalar scale quantizes per tensor, a 1-D one per axis.
        scale = x[1]
        zero = x[2] if given(x, 2) else torch.zeros(scale.shape, dtype=torch.int64)
        if scale.dim() == 0:
            return None, float(scale), int(zero)
        axis = a.get("axis", 1) % x[0].dim()
        return axis, scale.to(torch.float64), zero.to(torch.int64)

    def quantize_linear(a, x, opset):
        qtype = {torch.uint8: torch.quint8, torch.int8: torch.qint8}[
            x[2].dtype if given(x, 2) else torch.uint8]
        axis, scale, zero = quant_args(a, x)
        q = torch.quantize_per_tensor(x[0], scale, zero, qtype) if axis is None else \
            torch.quantize_per_channel(x[0], scale, zero, axis, qtype)
        return [q.int_repr()]

    def dequantize_linear(a, x, opset):
        axis, scale, zero = quant_args(a, x)
        q = torch._make_per_tensor_quantized_tensor(x[0], scale, zero) if axis is None else \
            torch._make_per_channel_quantized_tensor(x[0], scale, zero, axis)
        return [torch.dequantize(q)]

    def minus_zero(x, z, axis):
        # As MetaOp's torch binding: int32 less the zero point, a 1-D one along `axis`.
        xi = x.to(torch.int32)
        if z is None:
            return xi
        z = z.to(torch.int32)
        if z.dim() == 1 and z.numel() > 1 and axis is not None:
            shape = [1] * x.dim()
            shape[axis] = z.numel()
            z = z.reshape(shape)
        return xi - z

    def conv_geometry(a, x, w):
        # ONNX's strides, dilations and pads (or auto_pad's) as ATen takes them, with the pads
        # at the beginning and at the end of each axis apart (padded() applies unequal ones).
        nsp = w.dim() - 2
        k = a.get("kernel_shape") or list(w.shape[2:])
        stride = a.get("strides") or [1] * nsp
        dil = a.get("dilations") or [1] * nsp
        pads = a.get("pads") or [0] * (2 * nsp)
        auto = a.get("auto_pad", "NOTSET")
        if auto == "VALID":
            pads = [0] * (2 * nsp)
        elif auto in ("SAME_UPPER", "SAME_LOWER"):
            pads = [0] * (2 * nsp)
            for d in range(nsp):
                n = x.shape[2 + d]
                total = max(0, (-(-n // stride[d]) - 1) * stride[d] + (k[d] - 1) * dil[d] + 1 - n)
                small = total // 2
                pads[d], pads[d + nsp] = (small, total - small) if auto == "SAME_UPPER" else \
                    (total - small, small)
        return nsp, stride, dil, pads[:nsp], pads[nsp:], a.get("group", 1)

    def padded(x, begin, end, fill):
        if begin == end:
            return x, begin
        flat = [p for d in reversed(range(len(begin))) for p in (begin[d], end[d])]
        return F.pad(x, flat, value=fill), [0] * len(begin)

    def matmul_integer(a, x, opset):
        rows = x[0].dim() - 2 if x[0].dim() >= 2 else None
        return [torch.matmul(minus_zero(x[0], x[2] if given(x, 2) else None, rows),
                             minus_zero(x[1], x[3] if given(x, 3) else None, None))]

    def conv_integer(a, x, opset):
        nsp, stride, dil, begin, end, group = conv_geometry(a, x[0], x[1])
        xi, pad = padded(minus_zero(x[0], x[2] if given(x, 2) else None, None), begin, end, 0)
        w = minus_zero(x[1], x[3] if given(x, 3) else None, 0)
        return [torch.ops.aten.convolution(xi, w, None, stride, pad, dil, False, [0] * nsp,
                                           group)]

    def quantized(q, s, z, per_axis=True):
        # As MetaOp's torch binding: per tensor, or per channel along axis 0.
        z = torch.zeros(s.shape, dtype=torch.int64) if z is None else z.to(torch.int64)
        if s.numel() == 1:
            return torch._make_per_tensor_quantized_tensor(q, float(s.reshape(-1)[0]),
                                                           int(z.reshape(-1)[0]))
        return torch._make_per_channel_quantized_tensor(q, s.to(torch.float64).reshape(-1),
                                                        z.reshape(-1), 0)

    def zero_point(x, i):
        return int(x[i].reshape(-1)[0]) if given(x, i) else 0

    def qlinear_matmul(a, x, opset):
        # PyTorch's quantized engine (torch.backends.quantized.engine, the default one), as
        # MetaOp's torch binding runs it: quantized::linear on b transposed, prepacked.
        packed = torch.ops.quantized.linear_prepack(
            quantized(x[3].t().contiguous(), x[4], x[5] if given(x, 5) else None), None)
        qa = quantized(x[0], x[1], x[2] if given(x, 2) else None)
        return [torch.ops.quantized.linear(qa, packed, float(x[6].reshape(-1)[0]),
                                           zero_point(x, 7)).int_repr()]

    def qlinear_conv(a, x, opset):
        nsp, stride, dil, begin, end, group = conv_geometry(a, x[0], x[3])
        xp, pad = padded(x[0], begin, end, zero_point(x, 2))
        bias = None
        if given(x, 8):
            bias = (x[8].to(torch.float64) * x[4].to(torch.float64).reshape(-1) *
                    float(x[1].reshape(-1)[0])).to(torch.float32)
        qw = quantized(x[3], x[4], x[5] if given(x, 5) else None)
        packed = getattr(torch.ops.quantized, f"conv{nsp}d_prepack")(qw, bias, stride, pad, dil,
                                                                     group)
        qx = quantized(xp, x[1], x[2] if given(x, 2) else None)
        return [getattr(torch.ops.quantized, f"conv{nsp}d")(
            qx, packed, float(x[6].reshape(-1)[0]), zero_point(x, 7)).int_repr()]

    def dynamic_quantize_linear(a, x, opset):
        q = torch.quantize_per_tensor_dynamic(x[0], torch.quint8, False)
        return [q.int_repr(), torch.tensor(q.q_scale(), dtype=torch.float32),
                torch.tensor(q.q_zero_point(), dtype=torch.uint8)]

    ops = {name: unary(getattr(torch, name.lower())) for name in [
        "Neg", "Abs", "Sign", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Sin", "Cos", "Tan",
        "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Floor", "Ceil", "Round",
        "Relu", "Sigmoid", "Tanh"]}
    ops.update({
        "HardSwish": unary(F.hardswish),
        "Softplus": unary(lambda t: F.softplus(t, 1, 20)),
        "Softsign": unary(lambda t: t / (torch.abs(t) + 1)),
        "LeakyRelu": lambda a, x, o: [F.leaky_relu(x[0], a.get("alpha", 0.01))],
        "Elu": lambda a, x, o: [F.elu(x[0], a.get("alpha", 1.0))],
        "Selu": selu,
        "Celu": lambda a, x, o: [F.celu(x[0], a.get("alpha", 1.0))],
        "HardSigmoid": lambda a, x, o: [torch.clamp(x[0] * a.get("alpha", 0.2) +
                                                    a.get("beta", 0.5), 0, 1)],
        "ThresholdedRelu": lambda a, x, o: [F.threshold(x[0], a.get("alpha", 1.0), 0)],
        "Add": binary(torch.add), "Sub": binary(torch.sub), "Mul": binary(torch.mul),
        "Div": binary(lambda p, q: torch.div(p, q) if p.dtype.is_floating_point
                      else torch.div(p, q, rounding_mode="trunc")),
        "Pow": binary(lambda p, q: torch.pow(p, q).to(p.dtype)),
        "Equal": binary(torch.eq), "Less": binary(torch.lt), "LessOrEqual": binary(torch.le),
        "Greater": binary(torch.gt), "GreaterOrEqual": binary(torch.ge),
        "Max": variadic(torch.maximum), "Min": variadic(torch.minimum),
        "Sum": variadic(torch.add), "Mean": variadic(torch.add, mean=True),
        "Where": lambda a, x, o: [torch.where(x[0], x[1], x[2])],
        "And": binary(torch.logical_and), "Or": binary(torch.logical_or),
        "Xor": binary(torch.logical_xor),
        "BitwiseAnd": binary(torch.bitwise_and), "BitwiseOr": binary(torch.bitwise_or),
        "BitwiseXor": binary(torch.bitwise_xor), "BitwiseNot": unary(torch.bitwise_not),
        "BitShift": lambda a, x, o: [torch.bitwise_left_shift(x[0], x[1])
                                     if a["direction"] == "LEFT"
                                     else torch.bitwise_right_shift(x[0], x[1])],
        "Mod": lambda a, x, o: [torch.fmod(x[0], x[1]) if a.get("fmod", 0)
                                else torch.remainder(x[0], x[1])],
        "Clip": clip, "MatMul": binary(torch.matmul), "Gemm": gemm,
        "ReduceSum": reduction(lambda t, d, k: torch.sum(t, d, k)),
        "ReduceMean": reduction(lambda t, d, k: torch.mean(t, d, k)),
        "ReduceMax": reduction(lambda t, d, k: torch.amax(t, d, k)),
        "ReduceMin": reduction(lambda t, d, k: torch.amin(t, d, k)),
        "ReduceProd": reduction(prod),
        "ReduceL1": reduction(lambda t, d, k: torch.linalg.vector_norm(t, 1, d, k)),
        "ReduceL2": reduction(lambda t, d, k: torch.linalg.vector_norm(t, 2, d, k)),
        "ReduceSumSquare": reduction(lambda t, d, k: torch.sum(t * t, d, k)),
        "ReduceLogSum": reduction(lambda t, d, k: torch.log(torch.sum(t, d, k))),
        "ReduceLogSumExp": reduction(lambda t, d, k: torch.logsumexp(t, d, k)),
        "TopK": topk, "Softmax": softmax_like(0), "LogSoftmax": softmax_like(1),
        "LayerNormalization": layer_norm,
        "DFT": dft, "Det": unary(torch.linalg.det), "GridSample": grid_sample,
        "STFT": stft, "Attention": attention, "LSTM": recurrent, "GRU": recurrent,
        "RNN": recurrent, "QuantizeLinear": quantize_linear, "DequantizeLinear": dequantize_linear,
        "MatMulInteger": matmul_integer, "ConvInteger": conv_integer,
        "QLinearMatMul": qlinear_matmul, "QLinearConv": qlinear_conv,
        "DynamicQuantizeLinear": dynamic_quantize_linear,
    })
    return ops


def run_torch(path, feeds, names):
    """PyTorch eager on repro.json's node (its attributes and input files; model.onnx unused)."""
    import torch
    node = json.load(open(os.path.join(HERE, "repro.json")))["onnx_node"]
    ops = torch_ops()
    if node["op_type"] not in ops:
        raise NotImplementedError(f"this script has no eager call for {node['op_type']}; "
                                  f"metaop repro . replays it through LibTorch")
    attrs = dict(node["attributes"], _op=node["op_type"])
    xs = [None if f is None else torch.from_numpy(np.load(os.path.join(HERE, f)))
          for f in node["inputs"]]
    # One intra-op thread, as MetaOp's torch binding runs by default (--threads 1): sums split
    # over more threads round differently.
    torch.set_num_threads(1)
    with torch.no_grad():
        out = ops[node["op_type"]](attrs, xs, node["opset"])
    # The eager call returns the outputs by position; the node may leave some out ("").
    out = [t for t, n in zip(out, node.get("outputs", names)) if n]
    return f"torch {torch.__version__} (eager)", [t.numpy() for t in out[:len(names)]]


def num(v):
    return f"{float(v):.9g}"


def ulp_errors(got, exact):
    """Per element: the error in ULPs of the exact value's dtype; inf for a non-finite value on
    one side only (0 where both are the same non-finite value)."""
    g, e = got.astype(np.float64).ravel(), exact.astype(np.float64).ravel()
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        # The spacing at the dtype's largest value is its last step below (np.spacing says inf).
        a = np.abs(exact).astype(exact.dtype)
        spacing = np.where(np.isfinite(np.spacing(a)), np.spacing(a),
                           a - np.nextafter(a, np.zeros_like(a))).astype(np.float64).ravel()
        err = np.abs(g - e) / np.where(spacing > 0, spacing, np.finfo(np.float64).tiny)
    same = (np.isnan(g) & np.isnan(e)) | (g == e)
    err[same] = 0
    err[~same & ~(np.isfinite(g) & np.isfinite(e))] = np.inf
    return err


def main():
    manifest = json.load(open(os.path.join(HERE, "repro.json")))
    # The variables that chose the framework's CPU kernels when the finding was made
    # (ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY), set before the framework is imported.
    os.environ.update(manifest.get("environment", {}))
    global LEVEL
    LEVEL = manifest.get("level", {}).get("value")
    feeds = {name: np.load(os.path.join(HERE, f)) for name, f in manifest["feeds"]}
    outputs = manifest["outputs"]
    try:
        version, got = globals()["run_" + FRAMEWORK](os.path.join(HERE, "model.onnx"), feeds,
                                                   [o["name"] for o in outputs])
    except Exception as e:  # the framework refuses the model or fails running it
        print(f"{FRAMEWORK} cannot run model.onnx: {e}")
        # A crash finding (the framework failed on a valid model) reproduces when it fails the
        # same way: its message's last line is in the one the finding recorded.
        last = ([line.strip() for line in str(e).splitlines() if line.strip()] or [""])[-1]
        if manifest.get("kind") == "crash" and last and last in manifest.get("detail", ""):
            print("  the finding recorded the same failure: reproduced")
            return 1
        return 2
    print(f"{version}: {manifest['op_type']} node '{manifest['node']}' of model.onnx on "
          f"{', '.join(f for _, f in manifest['feeds']) or 'no inputs'}")
    reproduces = False
    for o, value in zip(outputs, got):
        if not o.get("reference"):
            continue
        exact = np.load(os.path.join(HERE, o["reference"]))
        value = np.asarray(value)
        if value.shape != exact.shape:
            print(f"{o['name']}: shape {value.shape}, exact {exact.shape}")
            reproduces = True
            continue
        if value.dtype != exact.dtype:
            # The finding may be the dtype itself (OpenCV computes float16 ops in float32).
            recorded = np.load(os.path.join(HERE, o["got"])) if o.get("got") else None
            same = recorded is not None and recorded.dtype == value.dtype
            print(f"{o['name']}: dtype {value.dtype}, exact {exact.dtype}; the finding recorded "
                  f"{recorded.dtype if recorded is not None else 'none'}: "
                  f"{'reproduced' if same else 'not reproduced'}")
            reproduces = reproduces or same
            continue
        if not np.issubdtype(exact.dtype, np.floating):
            wrong = np.flatnonzero(value.ravel() != exact.ravel())
            first = ""
            if len(wrong):
                i = int(wrong[0])
                index = [int(k) for k in np.unravel_index(i, exact.shape)] if exact.ndim else []
                first = (f"{o['name']}{index}: {FRAMEWORK} {value.ravel()[i]}, exact "
                         f"{exact.ravel()[i]}; ")
            print(f"{first or o['name'] + ': '}{len(wrong)} of {exact.size} elements differ")
            if o.get("got"):
                # Reproduced: the framework gives again the first wrong value the finding recorded.
                recorded = np.load(os.path.join(HERE, o["got"])).ravel()
                off = np.flatnonzero(recorded != exact.ravel())
                same = len(off) > 0 and value.ravel()[off[0]] == recorded[off[0]]
                if len(off):
                    print(f"  the finding recorded {recorded[off[0]]} at its first wrong element; "
                          f"{FRAMEWORK} gives {value.ravel()[off[0]]} there: "
                          f"{'reproduced' if same else 'not reproduced'}")
                reproduces = reproduces or bool(same)
            else:
                reproduces = reproduces or len(wrong) > 0
            continue
        err = ulp_errors(value, exact)
        i = int(np.argmax(err))
        index = tuple(int(k) for k in np.unravel_index(i, exact.shape)) if exact.ndim else ()
        print(f"{o['name']}{list(index)}: {FRAMEWORK} {num(value.ravel()[i])}, exact "
              f"{num(exact.ravel()[i])}, error {err[i]:.3g} ULPs; {int(np.sum(err > 4))} of "
              f"{exact.size} elements off by more than 4 ULPs, "
              f"{int(np.sum(np.isinf(err)))} non-finite on one side only")
        if o.get("got"):
            recorded = np.load(os.path.join(HERE, o["got"])).ravel()
            recorded_err = ulp_errors(recorded.reshape(exact.shape), exact)
            j = int(np.argmax(recorded_err))
            # Reproduced: the framework gives again the wrong value the finding recorded.
            same = recorded_err[j] > 0 and (value.ravel()[j] == recorded[j] or (
                np.isnan(value.ravel()[j]) and np.isnan(recorded[j])))
            print(f"  the finding recorded {num(recorded[j])} at its worst element; {FRAMEWORK} "
                  f"gives {num(value.ravel()[j])} there: "
                  f"{'reproduced' if same else 'not reproduced'}")
            reproduces = reproduces or bool(same)
    return 1 if reproduces else 0


if __name__ == "__main__":
    sys.exit(main())
