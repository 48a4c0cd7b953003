"""Per-tensor range choice by the error it causes at the model's outputs (``--calib-method auto``).

One global method (minmax, percentile, entropy, mse) is right for some tensors and wrong for
others: a clipping method helps a wide ReLU activation and hurts an output head or a tensor whose
rare large values carry the answer. ``auto`` chooses per tensor:

1. every candidate range is derived from the calibration histograms (no extra float runs):
   minmax, percentile at 99.9 / 99.99 / 99.999 %, entropy and mse;
2. a *simulation graph* is built from the float graph: every int8 activation passes through a
   fake-quantization chain ``MUL(1/s) -> ROUND -> MAXIMUM(qlo) -> MINIMUM(qhi) -> MUL(s)`` whose
   parameters are extra graph *inputs* (so a candidate is tried by setting four scalars, not by
   rebuilding a model), and the weights of CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED /
   TRANSPOSE_CONV are replaced by their per-channel int8 values, dequantized;
3. starting from the best single method (scored on the real int8 model), the tensors' parameter classes (tensors that must share one
   scale, as in :func:`edgerun.convert.quantize.quantize_graph`) are visited in graph order and each
   takes the candidate with the lowest error at the model outputs on up to 160 calibration
   samples: the worst output's relative squared error, so the figure the report leads with is the
   one minimized. Candidates that are all but equal are tried once. A work count bounds it
   (:data:`REFINE_WORK`), not a clock, so the same inputs give the same model on any machine.

Fixed-output ops (SOFTMAX, LOGISTIC, ...) keep their spec parameters and are not simulated; the
model inputs keep their min/max range. The real int8 model is scored with an output SOFTMAX in
int16 (``quantize_graph(wide_softmax=True)``, as a float-output conversion writes it), so int8's
1/256 output step does not drown the differences between the logits' candidate ranges.
"""

from __future__ import annotations

import copy
import time

import numpy as np

from edgerun.convert.calibrate import HistogramObserver, ranges_from

#: candidate ranges: (label, method, percentile)
CANDIDATES = (("mse", "mse", 99.99), ("minmax", "minmax", 99.99), ("percentile99.9", "percentile", 99.9),
              ("percentile99.99", "percentile", 99.99), ("percentile99.999", "percentile", 99.999),
              ("entropy", "entropy", 99.99))
#: the candidate scored first: the best single method on most benchmark models, so the others'
#: scores stop early (:func:`search`'s ``cut_short``); the choice does not depend on the order
#: (ties aside), only the time does
LIKELY_FIRST = "percentile99.999"
#: samples the search scores candidates on
SEARCH_SAMPLES = 160
MIN_SEARCH_SAMPLES = 48
#: float work (multiply-accumulates of the weight layers plus one per element of every other op's
#: output, :func:`float_work`) one candidate's score may take: sets the sample count for big
#: models. About 1.5 s of LiteRT float invokes on the machine of docs/benchmarks.md (palm
#: detection: 289 M, 24.5 ms an invoke). A count, not a clock: the choice does not depend on
#: how loaded the machine is (timed, it moved palm detection's sample count from 57 to 48
#: between two runs and, with it, the winning method)
SCORE_WORK = 16e9
#: passes of empirical bias correction (:func:`edgerun.convert.corrections.empirical_correction`)
EMPIRICAL_PASSES = 3
#: a simulated candidate must lower the error by this fraction to replace the current one (the
#: simulation's rounding noise is not a gain)
REFINE_GAIN = 0.01
#: candidate ranges closer than this (relative to the wider one) are one candidate
SAME_RANGE = 0.01
#: float work (:func:`float_work` x samples) the per-tensor search may take, counted as every
#: class scored with every other candidate: the search runs over all classes when its count fits,
#: else not at all, and step 1's best single method stands. A search cut short after the first
#: few classes fits the calibration samples, not the model (MediaPipe face detection: 9 of 52
#: classes searched, calibration score 19.45 -> 19.63 dB, held-out SQNR 20.57 -> 20.29 dB), and
#: when it was bounded by a clock (30 s) whether and how far it ran depended on the machine's load
#: (MLPerf Tiny ResNet-8: 12 of 14 classes in one run, 94.0 % / 92.5 % top-1 in two). MLPerf Tiny
#: ic (140 G), vww (174 G) and kws (24 G) fit; MediaPipe face detection (1.3 T) and larger do not
REFINE_WORK = 200e9
#: where the per-class search does not fit REFINE_WORK, the classes are searched by the kind of op
#: that writes them (8-9 kinds on MediaPipe's detectors) on as many evenly spread samples as this
#: float work pays for (every kind scored with every other candidate), and not at all below
#: GROUP_MIN_SAMPLES; the result is kept only when the real int8 model confirms it, as a per-class
#: one. Measured (MediaPipe, 80 calibration / 20 held-back samples, docs/benchmarks.md): palm
#: detection CONV_2D outputs percentile 99.9 %, PRELU 99.99 %, depthwise mse, held-back 12.57 ->
#: 14.17 dB, the same choices at 200 G (27 samples) and 100 G (13 samples; conversion CPU time
#: 76.6 s before, 109.4 s at 200 G, 90.1 s at 100 G); face (4 kinds, 80 samples) and pose detection
#: (4, 23 at 200 G) refined in the simulation, not confirmed by the real int8 model: unchanged
GROUP_WORK = 100e9
GROUP_MIN_SAMPLES = 8
#: and at most this many (PP-OCR's text-direction classifier, small per sample: 158 samples took
#: 49 s of search for a refinement the real int8 model did not confirm)
GROUP_MAX_SAMPLES = 48


def error_db(score: float) -> float:
    """A relative squared error (an int8 model's score: lower is better) as dB, rounded to 0.01
    (higher is better), as the reports print it."""
    return round(float(-10 * np.log10(max(score, 1e-15))), 2)


def float_work(g) -> int:
    """A machine-independent cost of one float invoke of ``g``: multiply-accumulates of CONV_2D,
    DEPTHWISE_CONV_2D, FULLY_CONNECTED and TRANSPOSE_CONV, one per output element of other ops."""
    total = 0
    for op in g.ops:
        if not op.outputs or op.outputs[0] < 0:
            continue
        n = int(np.prod(g.tensors[op.outputs[0]].shape or (1,)))
        if op.op in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV") and len(op.inputs) > 1:
            ws = g.tensors[op.inputs[1]].shape
            if op.op == "DEPTHWISE_CONV_2D":
                n *= int(np.prod(ws[1:3])) if len(ws) == 4 else 1
            elif op.op == "FULLY_CONNECTED":
                n *= int(ws[-1]) if ws else 1
            else:  # CONV_2D [O, KH, KW, I]; TRANSPOSE_CONV [O, KH, KW, I] (per output, an upper bound)
                n *= int(np.prod(ws[1:])) if len(ws) == 4 else 1
        total += n
    return total


def _classes(g, fops):
    """Union-find over the activation tensors of int8 ops that must share params (``same`` ops);
    returns (class root per tensor, set of roots with fixed params)."""
    from edgerun.convert.quantize import RULES

    parent: dict[int, int] = {}

    def find(a):
        parent.setdefault(a, a)
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    fixed = set()
    for i, op in enumerate(g.ops):
        if i in fops:
            continue
        rule = RULES[op.op]
        if rule.kind == "fixed":
            fixed.add(op.outputs[0])
        if rule.kind != "same":
            continue
        shared = range(len(op.inputs)) if rule.shared == (-1,) else rule.shared
        members = [o for o in op.outputs] + [op.inputs[k] for k in shared
                                            if k < len(op.inputs) and op.inputs[k] >= 0
                                            and g.tensors[op.inputs[k]].data is None]
        for m in members[1:]:
            ra, rb = find(members[0]), find(m)
            if ra != rb:
                parent[rb] = ra
    fixed_roots = {find(t) for t in fixed}
    return find, fixed_roots


def quantized_activations(g, fops) -> list[int]:
    """Activation tensors the int8 model holds in int8 (outputs of int8 ops, and the inputs)."""
    out = list(g.inputs)
    for i, op in enumerate(g.ops):
        if i not in fops:
            out += [o for o in op.outputs if g.tensors[o].dtype == "float32"]
    seen, res = set(), []
    for t in out:
        if t not in seen and g.tensors[t].data is None and g.tensors[t].dtype == "float32":
            seen.add(t)
            res.append(t)
    return res


def simulation_graph(g, tensors: list[int], cls_of: dict[int, int]):
    """(graph, param input names per class): ``g`` with int8 weights and a fake-quantization chain
    after every tensor in ``tensors``, parameterized per class by four [1] inputs."""
    from edgerun.convert.quantize import RULES, float_ops, weight_params

    sg = copy.deepcopy(g)
    fops = float_ops(g)
    for i, op in enumerate(sg.ops):
        rule = RULES.get(op.op)
        if i in fops or rule is None or rule.kind != "weights":
            continue
        wt = sg.tensors[op.inputs[rule.weight_input]]
        if wt.data is None or wt.data.dtype.kind != "f" or not wt.data.size:
            continue
        s, q = weight_params(wt.data, rule.weight_axis)
        shp = [1] * wt.data.ndim
        shp[rule.weight_axis] = -1
        new = sg.tensor(wt.name + "_fq", wt.data.shape, "float32",
                        data=(q.astype(np.float32) * s.reshape(shp)).astype(np.float32))
        op.inputs = list(op.inputs)
        op.inputs[rule.weight_input] = new
    params: dict[int, list[str]] = {}
    chains: dict[int, list] = {}  # tensor -> ops to insert after its producer
    for t in tensors:
        c = cls_of[t]
        if c not in params:
            ids = [sg.tensor(f"__fq{c}_{k}", (1,), "float32") for k in ("inv", "qlo", "qhi", "s")]
            params[c] = ids
        inv, qlo, qhi, s = params[c]
        shape = sg.tensors[t].shape
        mids = [sg.tensor(f"{sg.tensors[t].name}__fq{k}", shape, "float32") for k in range(5)]
        sg.replace_uses(t, mids[4])
        from edgerun.convert.graph import Op
        chains[t] = [Op("MUL", [t, inv], [mids[0]], {}),
                     Op("ROUND", [mids[0]], [mids[1]]),
                     Op("MAXIMUM", [mids[1], qlo], [mids[2]]),
                     Op("MINIMUM", [mids[2], qhi], [mids[3]]),
                     Op("MUL", [mids[3], s], [mids[4]], {})]
    ops = []
    for t in sg.inputs:
        ops += chains.get(t, [])
    for op in sg.ops:
        ops.append(op)
        for o in op.outputs:
            ops += chains.get(o, [])
    sg.ops = ops
    sg.inputs = list(sg.inputs) + [i for ids in params.values() for i in ids]
    names = {c: [sg.tensors[i].name for i in ids] for c, ids in params.items()}
    return sg, names


def _fq_values(lo: float, hi: float) -> tuple[float, float, float, float]:
    from edgerun.convert.quantize import activation_params
    s, z = activation_params(lo, hi)
    return 1.0 / s, float(-128 - z), float(127 - z), s


def _same(a, b) -> bool:
    w = max(a[1] - a[0], b[1] - b[0], 1e-12)
    return abs(a[0] - b[0]) <= SAME_RANGE * w and abs(a[1] - b[1]) <= SAME_RANGE * w


def _per_method(g, observers, heads, percentile) -> dict[str, dict[str, tuple[float, float]]]:
    """Each candidate's ranges by tensor name (step 1 of :func:`search`)."""
    per_method = {label: ranges_from(observers, m, p if m == "percentile" else percentile, heads=heads)
                  for label, m, p in CANDIDATES}
    # the model's inputs keep their full range under every candidate: their quantization is the one
    # error that no later choice (nor a layer kept in float by --max-drop) can undo, and an input's
    # range is usually its preprocessing's, all of it meaningful
    for name in heads:  # heads never clip more than the user's percentile, whatever the candidate
        if name in observers:
            plo, phi = observers[name].range("percentile", percentile)
            for label, m, _ in CANDIDATES:
                if m != "minmax":
                    lo, hi = per_method[label][name]
                    per_method[label][name] = (min(lo, plo), max(hi, phi))
    for i in g.inputs:
        name = g.tensors[i].name
        if name in observers:
            full = observers[name].range("minmax")
            for r in per_method.values():
                r[name] = full
    return per_method


def search(g, float_bytes: bytes, observers: dict[str, HistogramObserver], source, indices, *,
           heads=frozenset(), percentile: float = 99.99, refine: bool = True,
           samples: int = SEARCH_SAMPLES, progress=None, rival=None, wide_head: bool = True):
    """Ranges by name for ``--calib-method auto``; returns (ranges, info: what was tried and chosen),
    or (ranges, info, graph) when ``rival`` is given. ``wide_head``: score the int8 model with the
    16x8 classifier head the conversion will write (float32 outputs on targets that take it), or
    with int8 logits (:func:`edgerun.convert.quantize.wide_head_ops`).

    ``rival``: ``(g2, float bytes of g2, observers2, pairs)``, the cross-layer-equalized copy of
    ``g`` (:mod:`edgerun.convert.equalize`) and its own calibration. Step 1 scores the single methods
    on both graphs against the same float outputs; the graph with the better best single method
    goes on to steps 2-4 (the other is dropped, so the per-tensor search and the corrections run
    once, not once per graph), and ``info["equalization"]`` records the choice.

    1. each single method (CANDIDATES) is applied to every tensor and the *real* int8 model
       (quantize_graph, LiteRT's kernels) is scored on up to ``samples`` calibration samples;
    2. from the best of them, the per-class search on the simulation graph (see the module
       docstring) refines the ranges tensor by tensor, when its work fits :data:`REFINE_WORK`;
    3. the refined ranges are scored on the real int8 model too and kept only if they beat step 1's
       best: the simulation rounds at other points than the int8 kernels, so it proposes and the
       real model decides. The result is never worse, on the calibration samples, than the best
       single method;
    4. bias correction (:mod:`edgerun.convert.corrections`) is applied to ``g`` in place when the
       real int8 model confirms it lowers the error.
    """
    from edgerun.convert.drift import Int8Runner
    from edgerun.convert.quantize import float_ops, quantize_graph
    from edgerun.litert import make_interpreter

    t0 = time.perf_counter()
    per_method = _per_method(g, observers, heads, percentile)
    ref_it = make_interpreter(float_bytes, xnnpack=False)
    ref_it.allocate_tensors()

    def run_ref(smp):
        for d, x in zip(ref_it.get_input_details(), smp):
            ref_it.set_tensor(d["index"], np.ascontiguousarray(x, np.float32))
        ref_it.invoke()
        return [ref_it.get_tensor(d["index"]).astype(np.float64) for d in ref_it.get_output_details()]
    idx = list(indices)
    # as many samples as about SCORE_WORK of float work per candidate, within [MIN, samples]:
    # the figures are noisy on few samples (a softmax output's error sits in a few of them)
    fit = int(SCORE_WORK / max(float_work(g), 1))
    n = max(min(samples, fit), min(MIN_SEARCH_SAMPLES, samples))
    if len(idx) > n:
        idx = [idx[int(k)] for k in np.linspace(0, len(idx) - 1, n).round()]
    data = [source.sample(i) for i in idx]
    refs = [run_ref(smp) for smp in data]
    sig = [sum(float(np.sum(r[k] ** 2)) for r in refs) or 1.0 for k in range(len(refs[0]))]

    def combine(err) -> float:
        rel = [e / s for e, s in zip(err, sig)]
        return max(rel) + 1e-3 * sum(rel) / len(rel)  # the worst output, then the others

    cut: list[str] = []
    # the order the samples are scored in: after the first complete score, the samples with the
    # largest error first (the candidates' errors sit in the same samples, so one that cannot win
    # reaches the bound sooner); the sums, and so the choices, do not depend on it
    order = {"idx": list(range(len(data))), "sorted": False}

    def real_score(rng, graph=None, stop=None, label="") -> float:
        """The int8 model's error; with ``stop``, scoring ends as soon as the error reaches it (the
        sums only grow, so the candidate cannot win: what is returned is then a lower bound and
        ``label`` goes on the ``cut_short`` list)."""
        q = quantize_graph(g if graph is None else graph, rng, io_type="float32", wide_softmax=True,
                           wide_head=wide_head)
        run = Int8Runner(q.to_bytes("edgerun range search"))
        err = [0.0] * len(sig)
        per = np.zeros(len(data))
        for n_done, j in enumerate(order["idx"], 1):
            ref = refs[j]
            for k, o in enumerate(run(data[j])):
                d = o.astype(np.float64).reshape(ref[k].shape) - ref[k]
                e = float(np.sum(d * d))
                err[k] += e
                per[j] += e / sig[k]
            if stop is not None and n_done < len(data) and combine(err) >= stop:
                cut.append(f"{label} ({n_done} of {len(data)} samples)")
                break
        else:
            if not order["sorted"]:
                order["idx"], order["sorted"] = [int(j) for j in np.argsort(-per, kind="stable")], True
        return combine(err)

    db = error_db

    def single_scores(pm, graph, best=None, tag="", first=None) -> dict[str, float]:
        """Each distinct candidate's score (in CANDIDATES order, so ties go as before); ``first``
        is scored first: a likely winner makes the early stop of the others come sooner."""
        labels = [label for label, _, _ in CANDIDATES]
        kept: list[str] = []
        for label in labels:  # duplicates are decided in CANDIDATES order, as always
            if not any(all(_same(pm[label][k], pm[o][k]) for k in pm[label]) for o in kept):
                kept.append(label)
        order = ([first] if first in kept else []) + [x for x in kept if x != first]
        scores = {}
        for label in order:
            scores[label] = real_score(pm[label], graph, stop=best, label=tag + label)
            best = scores[label] if best is None else min(best, scores[label])
        return {label: scores[label] for label in kept}

    scores = single_scores(per_method, g, first=LIKELY_FIRST)
    equalization = None
    if rival is not None:  # cross-layer equalization, decided on the single methods' real int8 scores
        t_rival = time.perf_counter()
        g2, fb2, obs2, pairs = rival
        pm2 = _per_method(g2, obs2, heads, percentile)
        scores2 = single_scores(pm2, g2, best=min(scores.values()), tag="equalized ",
                                first=min(scores, key=lambda k: scores[k]))
        keep = min(scores2.values()) < min(scores.values())
        equalization = {"pairs": pairs, "kept": keep, "before_db": db(min(scores.values())),
                        "after_db": db(min(scores2.values())), "decided_on": "best single method"}
        if keep:
            g, float_bytes, observers, per_method, scores = g2, fb2, obs2, pm2, scores2
        t0 += time.perf_counter() - t_rival  # info['seconds'] is the search's own time, not the rival's scoring
    start = min(scores, key=lambda k: scores[k])
    info = {"method": "auto", "samples": len(data), "single_methods_db": {k: db(v) for k, v in scores.items()},
            "start": start, "classes": 0, "searched": 0, "changed": 0, "chosen": {}}
    if equalization is not None:
        info["equalization"] = equalization
    refined, sinfo = _refine(g, per_method, start, observers, data, refs, combine, float_ops(g),
                             refine, progress, make_interpreter)
    info.update(sinfo)
    best, best_score = per_method[start], scores[start]
    info["result"] = start
    if sinfo["changed"]:
        sc = real_score(refined, stop=best_score, label="per-tensor search")
        info["refined_db"] = db(sc)
        if sc < best_score:
            best, best_score, info["result"] = refined, sc, "per-tensor search from " + start
    # bias correction (edgerun.convert.corrections), kept when the real int8 model confirms it;
    # it changes ``g``'s bias constants in place (the float model was serialized before)
    from edgerun.convert import corrections

    fixes = corrections.bias_correction(g, corrections.input_means(g, float_bytes, source, indices))
    if fixes:
        old = corrections.apply(g, fixes)
        sc = real_score(best, stop=best_score, label="bias correction")
        info["bias_corrected_db"] = db(sc)
        if sc < best_score:
            best_score = sc
            info["bias_correction"] = len(fixes)
        else:
            corrections.apply(g, old)
            info["bias_correction"] = 0
    # empirical bias correction: the int8 model's own mean error per layer, a pass at a time, each
    # kept only when the real int8 model confirms it
    info["empirical_passes"] = 0
    for _ in range(EMPIRICAL_PASSES):
        fixes = corrections.empirical_correction(g, best, float_bytes, source, idx)
        if not fixes:
            break
        old = corrections.apply(g, fixes)
        sc = real_score(best, stop=best_score, label=f"empirical pass {len(info.get('empirical_tried_db', [])) + 1}")
        info.setdefault("empirical_tried_db", []).append(db(sc))
        if sc >= best_score:
            corrections.apply(g, old)
            break
        best_score = sc
        info["empirical_passes"] += 1
        info["empirical_db"] = db(sc)
    info["score_db"] = db(best_score)
    if cut:  # their figures above are bounds: each stopped once it could no longer win
        info["cut_short"] = cut
    info["seconds"] = round(time.perf_counter() - t0, 3)
    return (dict(best), info) if rival is None else (dict(best), info, g)


def _refine(g, per_method, start, observers, data, refs, combine, fops, refine, progress, make_interpreter):
    """The per-class search on the simulation graph, from ``per_method[start]``: over every class
    when its work count fits :data:`REFINE_WORK`, else none (``refine`` False: none)."""
    base = per_method[start]
    find, fixed_roots = _classes(g, fops)
    acts = [t for t in quantized_activations(g, fops) if g.tensors[t].name in base and find(t) not in fixed_roots]
    cls_of = {t: find(t) for t in acts}
    members: dict[int, list[int]] = {}
    for t in acts:
        members.setdefault(cls_of[t], []).append(t)
    info = {"classes": len(members), "searched": 0, "changed": 0, "chosen": {}}
    if not members or not refine:
        return dict(base), info
    order = sorted(members, key=lambda c: min(acts.index(t) for t in members[c]))
    units = [[c] for c in order]  # one class at a time
    need = len(members) * (len(CANDIDATES) - 1) * len(data) * float_work(g)
    if need > REFINE_WORK:
        info["stopped"] = (f"skipped: {len(members)} classes x {len(CANDIDATES) - 1} candidates x {len(data)} "
                           f"samples is {need / 1e9:.0f} G of float work, above {REFINE_WORK / 1e9:.0f} G")
        # by op kind instead: every class whose tensors an op of one kind writes takes one candidate
        # method together (each class its own range from it), on as many samples as GROUP_WORK pays for
        producer = {o: op.op for op in g.ops for o in op.outputs}
        kinds: dict[str, list[int]] = {}
        for c in order:
            kinds.setdefault(producer.get(members[c][0], "INPUT"), []).append(c)
        units = list(kinds.values())
        n = min(len(data), GROUP_MAX_SAMPLES,
                int(GROUP_WORK // (len(units) * (len(CANDIDATES) - 1) * max(float_work(g), 1))))
        if n < GROUP_MIN_SAMPLES:
            return dict(base), info
        pick = np.linspace(0, len(data) - 1, n).round().astype(int)
        data, refs = [data[i] for i in pick], [refs[i] for i in pick]
        info["stopped"] += f"; searched by op kind instead ({len(units)} kinds, {n} samples)"
        info["by_kind"] = True

    def class_range(c, label):
        rs = [per_method[label][g.tensors[t].name] for t in members[c]]
        return min(r[0] for r in rs), max(r[1] for r in rs)

    sg, pnames = simulation_graph(g, acts, cls_of)
    sim = make_interpreter(sg.to_bytes("edgerun range search"), xnnpack=False)
    sim.allocate_tensors()
    by_name = {d["name"]: d["index"] for d in sim.get_input_details()}
    model_inputs = [by_name[g.tensors[i].name] for i in g.inputs]
    outs = [d["index"] for d in sim.get_output_details()]

    def set_class(c, rng):
        for name, v in zip(pnames[c], _fq_values(*rng)):
            sim.set_tensor(by_name[name], np.array([v], np.float32))

    def score() -> float:
        err = [0.0] * len(refs[0])
        for smp, ref in zip(data, refs):
            for i, x in zip(model_inputs, smp):
                sim.set_tensor(i, np.ascontiguousarray(x, np.float32))
            sim.invoke()
            for k, o in enumerate(outs):
                d = sim.get_tensor(o).astype(np.float64).reshape(ref[k].shape) - ref[k]
                err[k] += float(np.sum(d * d))
        return combine(err)

    current = {c: class_range(c, start) for c in order}
    for c in order:
        set_class(c, current[c])
    best = score()
    for n, unit in enumerate(units):
        tried = [{c: current[c] for c in unit}]
        chosen = start
        for label, _, _ in CANDIDATES:
            r = {c: class_range(c, label) for c in unit}
            r = {c: v if v[1] > v[0] else current[c] for c, v in r.items()}
            if any(all(_same(r[c], x[c]) for c in unit) for x in tried):
                continue
            tried.append(r)
            for c in unit:
                set_class(c, r[c])
            sc = score()
            if sc < best * (1 - REFINE_GAIN):
                best, chosen = sc, label
                current.update(r)
            for c in unit:
                set_class(c, current[c])
        info["searched"] += len(tried) > 1
        if chosen != start:
            info["changed"] += 1
            key = g.tensors[members[unit[0]][0]].name
            if len(units) < len(order):  # by op kind
                key = f"{producer.get(members[unit[0]][0], 'INPUT')} ({len(unit)} classes)"
            info["chosen"][key] = chosen
        if progress:
            progress(n + 1, len(units))
    out = dict(base)
    for c, r in current.items():
        for t in members[c]:
            out[g.tensors[t].name] = r
    return out, info
