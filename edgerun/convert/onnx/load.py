"""Loading ONNX models: read, upgrade to the one opset the lowerings are written against, pin input
shapes, and run ONNX Runtime once for every tensor's static shape and folded constants."""

from __future__ import annotations

import numpy as np

from edgerun.errors import ConversionError


#: the opset every lowering is written against: older models are upgraded to it in memory
TARGET_OPSET = 13
#: newest default-domain opset accepted as it is
MAX_OPSET = 23


def default_opset(model) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1  # no default-domain import: the ONNX spec reads that as opset 1


def upgrade(model) -> tuple[object, list[str]]:
    """``model`` at opset >= TARGET_OPSET: (model, notes), upgraded in memory when older.

    ONNX's version converter does the work (attribute-to-input moves such as Clip min/max,
    Slice starts/ends, Pad pads, Split sizes, Squeeze/Unsqueeze axes; Upsample -> Resize; the
    removal of BatchNormalization's ``spatial`` and ``consumed_inputs`` ...). Where it fails,
    :func:`_fixups` rewrites what it stumbles on and the conversion is tried once more.
    """
    opset = default_opset(model)
    if opset > MAX_OPSET:
        raise ConversionError(f"ONNX opset {opset} is newer than this converter knows (up to {MAX_OPSET}); "
                              f"export with opset {MAX_OPSET} or older")
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            from edgerun.errors import UnsupportedOpError
            raise UnsupportedOpError(f"ONNX {node.domain}.{node.op_type}", None,
                                     detail=f"node '{node.name or node.output[0]}' (opset {opset}): custom-domain "
                                            "ops are not supported")
    if opset >= TARGET_OPSET:
        return model, []
    if opset < 7:
        model = _prelu_channel_slopes(model)
    try:
        up = _convert_version(model)
    except Exception as first:  # the converter raises bare RuntimeError / ValueError / IndexError
        try:
            up = _convert_version(_fixups(model))
        except Exception:
            raise ConversionError(f"cannot upgrade the ONNX model from opset {opset} to {TARGET_OPSET}: "
                                  f"{str(first).splitlines()[0][:200]}; re-export it with opset "
                                  f"{TARGET_OPSET} or newer") from None
    return up, [f"ONNX opset {opset} upgraded to {TARGET_OPSET} in memory (onnx.version_converter)"]


def _convert_version(model):
    """onnx.version_converter without carrying large float weights through its C++ round trip: they
    are set aside (the adapters only read small shape / axes constants) and put back afterwards."""
    import copy

    import onnx
    from onnx import version_converter
    big = [i for i in model.graph.initializer if i.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE,
                                                                 onnx.TensorProto.FLOAT16)
           and int(np.prod(i.dims)) > 4096]
    if not big:
        return version_converter.convert_version(model, TARGET_OPSET)
    names = {i.name for i in big}
    light = onnx.ModelProto()
    light.CopyFrom(model)
    keep = [i for i in light.graph.initializer if i.name not in names]
    del light.graph.initializer[:]
    light.graph.initializer.extend(keep)
    listed = {i.name for i in light.graph.input}
    for i in big:  # a dangling name would fail the converter's checks: list it as a graph input
        if i.name not in listed:
            light.graph.input.append(onnx.helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)))
    up = version_converter.convert_version(light, TARGET_OPSET)
    extra = {i.name for i in big} - listed
    inputs = [i for i in up.graph.input if i.name not in extra]
    del up.graph.input[:]
    up.graph.input.extend(inputs)
    up.graph.initializer.extend(copy.copy(i) for i in big)
    return up


def _prelu_channel_slopes(model):
    """Before opset 7, PRelu applied a 1-D slope per channel (axis 1); from 7 on it broadcasts
    numpy-style (along the last axis), and the version converter leaves the slope as it is. A 1-D
    constant slope of the channel count becomes (C, 1, ..., 1), which means the same at any opset."""
    import copy

    import onnx
    from onnx import numpy_helper
    users = [n for n in model.graph.node if n.op_type == "PRelu" and len(n.input) > 1]
    inits = {i.name: i for i in model.graph.initializer}
    if not any(n.input[1] in inits for n in users):
        return model
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - shape inference is an optional help here
        return model
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in list(inferred.graph.value_info)
             + list(inferred.graph.input) if vi.type.tensor_type.HasField("shape")}
    m = copy.deepcopy(model)
    inits = {i.name: i for i in m.graph.initializer}
    for n in users:
        slope, r = inits.get(n.input[1]), ranks.get(n.input[0], 0)
        if slope is None or r <= 2:
            continue
        a = numpy_helper.to_array(slope)
        if a.ndim == 1 and a.size > 1:
            slope.CopyFrom(numpy_helper.from_array(a.reshape((a.size,) + (1,) * (r - 2)), slope.name))
            for vi in m.graph.input:
                if vi.name == slope.name:
                    del vi.type.tensor_type.shape.dim[:]
                    for dd in (a.size,) + (1,) * (r - 2):
                        vi.type.tensor_type.shape.dim.add().dim_value = dd
    return m


def _fixups(model):
    """A copy of ``model`` with what the version converter cannot take rewritten.

    * ``Dropout`` / ``Identity`` are pass-throughs at inference: their main output is renamed onto
      their input's consumers beforehand, so the converter's Dropout adapters (``is_test``,
      ``ratio`` moving to an input) have nothing to trip on; a Dropout mask output becomes an
      all-true constant of the input's shape only when used, which the lowering then folds.
    * a graph without a default-domain opset import gets one at version 1.
    """
    import copy

    import onnx
    m = copy.deepcopy(model)
    if not any(i.domain in ("", "ai.onnx") for i in m.opset_import):
        m.opset_import.add(domain="", version=1)
    outputs = {o.name for o in m.graph.output}
    rename: dict[str, str] = {}
    keep = []
    for n in m.graph.node:
        for i, name in enumerate(n.input):
            if name in rename:
                n.input[i] = rename[name]
        if n.op_type in ("Dropout", "Identity") and n.output[0] not in outputs and not any(
                o for o in n.output[1:]):
            rename[n.output[0]] = n.input[0]
            continue
        keep.append(n)
    if rename:
        del m.graph.node[:]
        m.graph.node.extend(keep)
    for o in m.graph.output:
        if o.name in rename:
            raise ConversionError("internal: a renamed Dropout output is a graph output")
    del onnx
    return m


def real_inputs(model) -> list:
    """The graph inputs that are not initializers (the ones a user feeds)."""
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def parse_input_shapes(spec) -> dict:
    """``"x:1,3,224,224;y:1,10"`` or ``"1,3,224,224"`` or a dict -> {name or "": shape}."""
    if not spec:
        return {}
    if isinstance(spec, dict):
        return {k: tuple(int(d) for d in v) for k, v in spec.items()}
    out = {}
    for part in str(spec).split(";"):
        part = part.strip()
        if not part:
            continue
        name, _, dims = part.rpartition(":")
        try:
            out[name] = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
        except ValueError:
            raise ConversionError(f"--input-shape '{part}': expected NAME:D0,D1,... (integers)") from None
        if not out[name] or not all(1 <= d <= 2 ** 31 - 1 for d in out[name]):
            raise ConversionError(f"--input-shape '{part}': every dimension must be an integer from 1 to 2^31-1")
    return out


def load_onnx(path_or_bytes):
    import onnx
    try:
        if isinstance(path_or_bytes, (bytes, bytearray)):
            return onnx.load_from_string(bytes(path_or_bytes))
        return onnx.load(str(path_or_bytes))
    except Exception as e:  # protobuf decode errors have no common base class
        from edgerun.errors import ModelFormatError
        raise ModelFormatError(f"cannot read ONNX model {path_or_bytes if isinstance(path_or_bytes, str) else ''}: {e}") \
            from None


def pin_shapes(model, input_shapes: dict | None = None) -> dict[str, tuple]:
    """Concrete shapes of the model's real inputs (not initializers); raises on what cannot be pinned."""
    input_shapes = dict(input_shapes or {})
    inits = {i.name for i in model.graph.initializer}
    real = [i for i in model.graph.input if i.name not in inits]
    if "" in input_shapes:
        if len(real) != 1:
            raise ConversionError("--input-shape without a name needs a model with one input; this one has "
                                  f"{len(real)}: {', '.join(i.name for i in real)} (use NAME:D0,D1,...)")
        input_shapes[real[0].name] = input_shapes.pop("")
    unknown = set(input_shapes) - {i.name for i in real}
    if unknown:
        raise ConversionError(f"--input-shape names {', '.join(sorted(unknown))}, but the model's inputs are "
                              f"{', '.join(i.name for i in real)}")
    out = {}
    for inp in real:
        tt = inp.type.tensor_type
        if inp.name in input_shapes:
            shape = input_shapes[inp.name]
            if tt.HasField("shape") and len(tt.shape.dim) != len(shape):
                raise ConversionError(f"--input-shape gives {len(shape)} dims for input '{inp.name}', "
                                      f"which has {len(tt.shape.dim)}")
            out[inp.name] = tuple(shape)
            continue
        if not tt.HasField("shape"):
            raise ConversionError(f"input '{inp.name}' has no shape (rank unknown); pin it with "
                                  f"--input-shape {inp.name}:D0,D1,...")
        dims = []
        for ax, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            elif ax == 0:
                dims.append(1)  # dynamic batch: convert for batch 1, as TFLite models are
            else:
                sym = d.dim_param or "?"
                raise ConversionError(
                    f"input '{inp.name}' has a dynamic dimension {ax} ('{sym}') that the converter cannot pin; "
                    f"give it with --input-shape {inp.name}:"
                    + ",".join(str(x.dim_value) if x.dim_value > 0 else ("1" if i == 0 else "N")
                               for i, x in enumerate(tt.shape.dim)))
        out[inp.name] = tuple(dims)
    return out


def _onnx_dtype(elem_type):
    import onnx
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def session(model, providers=("CPUExecutionProvider",), optimize=True):
    """An ONNX Runtime session over ``model`` (a ModelProto)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 4  # errors reach the user as ConversionError, not as log lines
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    m = model
    if m.ir_version > 10:
        import copy
        m = copy.deepcopy(model)
        m.ir_version = 10
    try:
        return ort.InferenceSession(m.SerializeToString(), so, providers=list(providers))
    except Exception as e:
        raise ConversionError(f"ONNX Runtime cannot load the model: {str(e).splitlines()[0][:300]}") from None


def with_fixed_inputs(model, shapes: dict):
    """A copy of ``model`` with the given concrete input shapes."""
    import copy
    m = copy.deepcopy(model)
    for inp in m.graph.input:
        if inp.name in shapes:
            tt = inp.type.tensor_type
            del tt.shape.dim[:]
            for d in shapes[inp.name]:
                tt.shape.dim.add().dim_value = int(d)
    return m


def probe(model, shapes: dict, seed: int = 0):
    """Run ``model`` once with every node output exposed: {name: array}."""
    import onnx
    m = with_fixed_inputs(model, shapes)
    known = {o.name for o in m.graph.output}
    for node in m.graph.node:
        for o in node.output:
            if o and o not in known:
                m.graph.output.append(onnx.ValueInfoProto(name=o))
                known.add(o)
    sess = session(m, optimize=False)
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in sess.get_inputs():
        dt = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
              "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16,
              "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16,
              "tensor(uint32)": np.uint32, "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_}.get(inp.type)
        if dt is None:
            raise ConversionError(f"input '{inp.name}' has type {inp.type}; the converter takes float, integer "
                                  "or bool inputs")
        if inp.name not in shapes:
            continue
        if np.dtype(dt).kind in "iu":  # small non-negative integers: valid as indices too
            feeds[inp.name] = rng.integers(0, 2, shapes[inp.name]).astype(dt)
        elif dt == np.bool_:
            feeds[inp.name] = np.zeros(shapes[inp.name], bool)
        else:
            feeds[inp.name] = rng.standard_normal(shapes[inp.name]).astype(dt)
    try:
        outs = sess.run(None, feeds)
    except Exception as e:
        raise ConversionError(f"ONNX Runtime cannot run the model with input shapes "
                              f"{ {k: list(v) for k, v in shapes.items()} }: {str(e).splitlines()[0][:300]}") from None
    return {o.name: a for o, a in zip(sess.get_outputs(), outs)}


def fold_constant_dequantize(model):
    """A copy of ``model`` whose DequantizeLinear nodes on constants are replaced by float initializers.

    QDQ models written for opset 11 / 12 often carry per-channel weights as DequantizeLinear with an
    ``axis`` attribute, which only opset 13 defines (ONNX Runtime refuses them); the arithmetic,
    ``(x - zero_point) * scale`` along ``axis``, is done here instead. Returns ``model`` itself when
    there is nothing to fold.
    """
    import copy

    from onnx import numpy_helper
    inits = {i.name: i for i in model.graph.initializer}
    todo = [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input
            and all((not i) or i in inits for i in n.input)]
    if not todo:
        return model
    m = copy.deepcopy(model)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    keep = []
    new_inits = []
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and n.input and all((not i) or i in inits for i in n.input):
            x = inits[n.input[0]].astype(np.float64)
            scale = inits[n.input[1]].astype(np.float64)
            zp = inits[n.input[2]].astype(np.float64) if len(n.input) > 2 and n.input[2] else np.zeros_like(scale)
            axis = 1
            for a in n.attribute:
                if a.name == "axis":
                    axis = a.i
            if scale.size > 1:
                shp = [1] * x.ndim
                shp[axis % x.ndim] = -1
                scale, zp = scale.reshape(shp), zp.reshape(shp)
            y = ((x - zp) * scale).astype(np.float32)
            new_inits.append(numpy_helper.from_array(y, n.output[0]))
            continue
        keep.append(n)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    m.graph.initializer.extend(new_inits)
    return m
