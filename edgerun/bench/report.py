"""Self-contained HTML reports: one file, no network, plots as inline PNG (matplotlib, the
``edgerun[plot]`` extra).

- :func:`bench_html` / :func:`write_bench_report`: ``edgerun bench --report FILE.html`` (latency
  histogram, latency over time, power over time with inference markers, temperature and clock,
  per-op time, engines side by side, the run rules and every energy figure).
- :func:`convert_html` / :func:`write_convert_report`: ``edgerun convert --report FILE.html``
  (per-layer SQNR, per-output accuracy).
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import os
from pathlib import Path

from edgerun.errors import EdgerunError

COLORS = {"edgerun": "#1f77b4", "litert": "#ff7f0e", "litert-xnnpack": "#2ca02c"}
#: inference markers drawn at most (a long run is thinned evenly)
MAX_MARKERS = 1500

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;
max-width:1100px;color:#222;background:#fff}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
.sub{color:#666;font-size:13px} table{border-collapse:collapse;font-size:13px;margin:8px 0}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:right} th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left} .warn{background:#fff3cd;border:1px solid #e0c060;padding:8px;
margin:8px 0} .note{color:#555;font-size:13px} img{max-width:100%;border:1px solid #eee;margin:6px 0}
code{background:#f4f4f4;padding:1px 4px}
"""


def _plt():
    try:
        import matplotlib
    except ImportError as e:
        raise EdgerunError("an HTML report needs matplotlib: pip install 'edgerun[plot]'") from e
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    _plt().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(b64: str, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'


def _fmt(v, spec=".3f", none="-") -> str:
    if v is None:
        return none
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return format(v, spec)
    return html.escape(str(v))


def _table(header: list[str], rows: list[list]) -> str:
    h = "".join(f"<th>{html.escape(c)}</th>" for c in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def _page(title: str, sub: str, body: str) -> str:
    from edgerun import __version__

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><div class=\"sub\">{sub}</div>{body}"
            f'<p class="sub">edgerun {html.escape(__version__)}, {stamp}</p></body></html>\n')


# ---- bench ------------------------------------------------------------------------------------

def _bench_plots(rep: dict) -> list[tuple[str, str, str]]:
    """(heading, png base64, caption) per plot."""
    import numpy as np

    plt = _plt()
    engines = {e: v for e, v in rep["engines"].items() if "samples" in v}
    out = []
    if not engines:
        return out
    # latency histogram
    fig, ax = plt.subplots(figsize=(9, 3.4))
    allv = np.concatenate([np.asarray(v["samples"]["latency_ms"]) for v in engines.values()])
    lo, hi = max(allv.min(), 1e-6), allv.max()
    logx = hi / lo > 30
    bins = np.geomspace(lo, hi * 1.001, 60) if logx else np.linspace(lo, hi * 1.001, 60)
    for e, v in engines.items():
        ax.hist(v["samples"]["latency_ms"], bins=bins, histtype="stepfilled", alpha=0.45,
                color=COLORS.get(e), label=f"{e} (p90 {v['latency_ms']['p90']:.3g} ms)")
        ax.axvline(v["latency_ms"]["p90"], color=COLORS.get(e), ls="--", lw=1)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel("latency per invoke (ms)")
    ax.set_ylabel("invokes")
    ax.legend(fontsize=8)
    out.append(("Latency histogram", _png(fig), "dashed lines: p90, the single-stream headline"))
    # latency over time
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for e, v in engines.items():
        ax.plot(v["samples"]["start_s"], v["samples"]["latency_ms"], ".", ms=2, color=COLORS.get(e), label=e)
    ax.set_xlabel("time since the benchmark started (s)")
    ax.set_ylabel("latency (ms)")
    if logx:
        ax.set_yscale("log")
    ax.legend(fontsize=8, markerscale=4)
    out.append(("Latency over time", _png(fig), "each dot is one invoke, at the time it started"))
    # power over time with inference markers
    tel = rep.get("telemetry") or {}
    pw = tel.get("power") or {}
    if pw.get("t_s"):
        fig, ax = plt.subplots(figsize=(9, 3.6))
        ax.plot(pw["t_s"], pw["w"], color="#444", lw=1.2, label="power")
        top = max(pw["w"]) if pw["w"] else 1.0
        if rep.get("idle_window_s"):
            a, b = rep["idle_window_s"]
            ax.axvspan(a, b, color="#bbb", alpha=0.3, label="idle measurement")
        for e, v in engines.items():
            a, b = v["window_s"]
            ax.axvspan(a, b, color=COLORS.get(e), alpha=0.12)
            starts = np.asarray(v["samples"]["start_s"])
            if len(starts) > MAX_MARKERS:
                starts = starts[np.linspace(0, len(starts) - 1, MAX_MARKERS).astype(int)]
            ax.vlines(starts, 0, top * 0.06, color=COLORS.get(e), lw=0.5, label=f"{e} inferences")
        en = rep.get("energy") or {}
        if en.get("idle_power_w") is not None:
            ax.axhline(en["idle_power_w"], color="#888", ls=":", lw=1, label="idle power")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("time since the benchmark started (s)")
        ax.set_ylabel("W")
        ax.legend(fontsize=8, loc="upper right")
        out.append(("Power over time", _png(fig),
                    f"source {html.escape(str(en.get('source')))}; shaded: each engine's measured window; "
                    "ticks at the bottom: inference starts"))
    th = tel.get("thermal") or {}
    if th.get("t_s"):
        fig, ax = plt.subplots(figsize=(9, 3.2))
        zones = sorted({z for s in th["temp_c"] for z in s})
        for z in zones:
            ax.plot(th["t_s"], [s.get(z, np.nan) for s in th["temp_c"]], lw=1.2, label=z)
        ax.set_xlabel("time since the benchmark started (s)")
        ax.set_ylabel("deg C")
        if th["cpu_mhz"] and any(th["cpu_mhz"]):
            ax2 = ax.twinx()
            ax2.plot(th["t_s"], [max(s.values()) if s else np.nan for s in th["cpu_mhz"]], color="#9467bd",
                     lw=1, ls="--", label="max CPU clock")
            ax2.set_ylabel("MHz")
            ax2.legend(fontsize=8, loc="lower right")
        if zones:
            ax.legend(fontsize=8, loc="upper left")
        out.append(("Temperature and clock", _png(fig),
                    "thermal zones (left axis) and the highest CPU clock"))
    prof = (rep["engines"].get("edgerun") or {}).get("profile")
    if prof:
        fig, ax = plt.subplots(figsize=(9, 0.4 * len(prof) + 1))
        ops = [p["op"] for p in prof][::-1]
        ax.barh(ops, [p["ms"] for p in prof][::-1], color=COLORS["edgerun"])
        ax.set_xlabel("ms per invoke")
        out.append(("Per-op time (edgerun)", _png(fig), "from a separate profiled pass, not the timed run"))
    # engines side by side
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    names = list(engines)
    x = np.arange(len(names))
    for i, (q, col) in enumerate(zip(("p50", "p90", "p99"), ("#c7c7c7", "#7f7f7f", "#3a3a3a"))):
        axes[0].bar(x + (i - 1) * 0.27, [engines[e]["latency_ms"][q] for e in names], 0.27, label=q,
                    color=col)
    axes[0].set_xticks(x, names, fontsize=8)
    axes[0].set_ylabel("latency (ms)")
    axes[0].legend(fontsize=8)
    jpi = [(engines[e].get("energy") or {}).get("joules_per_inference") for e in names]
    if any(j is not None for j in jpi):
        axes[1].bar(x, [j * 1e3 if j is not None else 0 for j in jpi], color=[COLORS.get(e) for e in names])
        axes[1].set_ylabel("mJ per inference")
    else:
        axes[1].bar(x, [engines[e]["throughput_ips"] or 0 for e in names],
                    color=[COLORS.get(e) for e in names])
        axes[1].set_ylabel("inferences / s")
    axes[1].set_xticks(x, names, fontsize=8)
    fig.tight_layout()
    out.append(("Engines side by side", _png(fig), ""))
    return out


def bench_html(rep: dict, base: Path | None = None) -> str:
    rules = rep.get("rules", {})
    title = f"edgerun bench: {Path(str(rep.get('model', 'model'))).name}"
    sub = html.escape(f"scenario {rep.get('scenario')}, driver {rules.get('driver')}, "
                      f"model sha256 {rules.get('model_sha256', '')[:16]}...")
    parts = []
    for w in rep.get("warnings", []):
        parts.append(f'<div class="warn">WARNING: {html.escape(w)}</div>')
    rows = []
    for e, v in rep["engines"].items():
        if "error" in v:
            rows.append([html.escape(e)] + ["-"] * 10 + [html.escape(v["error"])])
            continue
        en, th = v.get("energy") or {}, v.get("thermal") or {}
        rows.append([html.escape(e), _fmt(v["latency_ms"]["p50"]), _fmt(v["latency_ms"]["p90"]),
                     _fmt(v["latency_ms"]["p99"]), _fmt(v.get("throughput_ips"), ",.1f"),
                     str(v.get("inferences")), _fmt(en.get("joules_per_inference"), ".4g"),
                     _fmt(en.get("inferences_per_joule"), ",.1f"),
                     _fmt(en.get("avg_power_w"), ".2f"), _fmt(en.get("idle_power_w"), ".2f"),
                     _fmt(th.get("max_temp_c"), ".1f"), _fmt(th.get("throttled"))])
    parts.append("<h2>Results</h2>" + _table(
        ["engine", "p50 ms", "p90 ms", "p99 ms", "inferences/s", "inferences", "J/inference",
         "inferences/J", "avg W", "idle W", "max temp C", "throttled"], rows))
    en = rep.get("energy") or {}
    if en.get("source"):
        lab = f" ({html.escape(en.get('source_label') or '')})" if en.get("source_label") else ""
        kind = "USER-SUPPLIED constant, not measured" if en.get("user_supplied") else "measured"
        parts.append(f'<p class="note">Energy source: <code>{html.escape(en["source"])}</code>{lab}, {kind}; '
                     f"idle power {'subtracted' if en.get('idle_subtracted') else 'not subtracted'}.</p>")
    else:
        parts.append(f'<p class="note">Energy: {html.escape(en.get("message") or "not measured")}.</p>')
    th = rep.get("thermal") or {}
    if th.get("message"):
        parts.append(f'<p class="note">Thermal: {html.escape(th["message"])}.</p>')
    for heading, b64, caption in _bench_plots(rep):
        parts.append(f"<h2>{html.escape(heading)}</h2>{_img(b64, heading)}"
                     + (f'<div class="note">{caption}</div>' if caption else ""))
    rr = [[html.escape(k), html.escape(str(v))] for k, v in rules.items()]
    for e, v in rep["engines"].items():
        if "kernel_path" in v:
            rr.append([f"kernel path ({html.escape(e)})", html.escape(v["kernel_path"])])
    parts.append("<h2>Run rules</h2>" + _table(["rule", "value"], rr))
    logs = []
    for e, v in rep["engines"].items():
        lg = v.get("loadgen") or {}
        if lg.get("log_dir"):
            d = Path(lg["log_dir"])
            rel = os.path.relpath(d, base) if base else str(d)
            logs.append([html.escape(e), html.escape(str(lg.get("result"))),
                         f'<a href="{html.escape(rel)}/mlperf_log_summary.txt">summary</a>, '
                         f'<a href="{html.escape(rel)}/mlperf_log_detail.txt">detail</a>'])
    if logs:
        parts.append("<h2>MLPerf LoadGen logs</h2>" + _table(["engine", "LoadGen result", "logs"], logs))
    return _page(title, sub, "".join(parts))


def _write(path: Path, text: str) -> None:
    from edgerun._fs import atomic_write

    atomic_write(path, text.encode("utf-8"))  # a temp file and a rename: never half a page, never a FIFO


def write_bench_report(rep: dict, path: Path) -> None:
    path = Path(path)
    _write(path, bench_html(rep, base=path.resolve().parent))


# ---- convert ----------------------------------------------------------------------------------

def convert_html(d: dict) -> str:
    plt = _plt()
    parts = []
    for w in d.get("warnings", []):
        parts.append(f'<div class="warn">WARNING: {html.escape(str(w))}</div>')
    outs = d.get("outputs") or []
    parts.append("<h2>Outputs</h2>" + _table(
        ["output", "SQNR dB", "max abs err", "top-1 agreement %", "samples"],
        [[html.escape(o["name"]), _fmt(o["sqnr_db"], ".2f"), _fmt(o["max_abs_err"], ".5g"),
          _fmt(o.get("top1_agreement"), ".1f"), str(o.get("samples"))] for o in outs]))
    layers = d.get("layers") or []
    if layers:
        fig, ax = plt.subplots(figsize=(9, 3.6))
        y = [min(x["sqnr_db"], 150.0) for x in layers]
        cols = ["#d62728" if x.get("float") else "#1f77b4" for x in layers]
        ax.bar(range(len(layers)), y, color=cols)
        ax.plot(range(len(layers)), y, color="#444", lw=0.8)
        ax.set_xlabel("layer (graph order)")
        ax.set_ylabel("SQNR vs float (dB)")
        if len(layers) <= 40:
            ax.set_xticks(range(len(layers)), [x["op"] for x in layers], rotation=70, fontsize=7)
        parts.append("<h2>Per-layer SQNR</h2>" + _img(_png(fig), "per-layer SQNR")
                     + '<div class="note">higher is closer to the float model; red: kept in float</div>')
        parts.append(_table(["#", "op", "tensor", "SQNR dB", "kept float"],
                            [[str(x["index"]), html.escape(x["op"]), html.escape(x["tensor"]),
                              _fmt(x["sqnr_db"], ".2f"), _fmt(bool(x.get("float")))] for x in layers]))
    else:
        parts.append('<p class="note">No per-layer figures (run with --per-layer).</p>')
    sub = html.escape(f"{d.get('source')} -> {d.get('output')}: {d.get('mode')}, "
                      f"{d.get('size_bytes')} bytes, "
                      f"kernel path {d.get('kernel_path')}, verdict {'ok' if d.get('ok') else 'FAILED'}")
    return _page(f"edgerun convert: {Path(str(d.get('source'))).name}", sub, "".join(parts))


def write_convert_report(d: dict, path: Path) -> None:
    _write(path, convert_html(d))
