"""The sweep's pure parts: the grid, reading one `specd ab --json` into a point, the Pareto front,
the comparisons the DLM issue asks for, and the SVG picture. No model, no subprocess: the unit test
(test_pareto.py) drives these directly. Python 3 standard library only."""

import html
import math

# --- grid -----------------------------------------------------------------------------------

# Eq. 11's entropy threshold (nats) and distance penalty, the window: the paper's Pareto end points
# are tau 0.2 / lambda 0.01 (conservative) and tau 0.9 (aggressive), its best range tau 0.3-0.6.
# The grids reach 1.5: the 135M adapter's mask rows are rarely below 0.5 nats, so at the paper's
# range streaming decoding hardly fills (and with no forced fill, tau 0.2 is plain decoding).
GRIDS = {
    # a smoke run: two streaming points and their block-wise twin
    "quick": {"stream": [(0.3, 0.1, 4), (0.9, 0.1, 4)], "block": [(0.9, 0.1, 4)],
              "decoders": [], "smooth": []},
    # the (tau, lambda, W) sweep of streaming decoding
    "default": {"stream": [(t, l, w) for w in (4, 8) for l in (0.01, 0.1)
                           for t in (0.3, 0.9, 1.5)],
                "block": [], "decoders": [], "smooth": []},
    # default plus block-wise decoding at the same points, the dInfer decoders over their
    # thresholds, and iteration smoothing on and off
    "full": {"stream": [(t, l, w) for w in (4, 8) for l in (0.01, 0.1)
                        for t in (0.3, 0.9, 1.5)],
             "block": [(t, l, w) for w in (4, 8) for l in (0.1,) for t in (0.3, 0.9, 1.5)],
             "decoders": [("threshold", t, 4) for t in (0.9, 0.7, 0.5)]
                         + [("hierarchical", t, 4) for t in (0.92, 0.8)]
                         + [("credit", t, 4) for t in (0.9, 0.7, 0.5)],
             "smooth": [(0.9, 0.1, 4, 0.3), (1.5, 0.1, 4, 0.3)]},
}


def fmt(x):
    """A number as an option value: short, no trailing zeros."""
    return ("%g" % x)


def grid_configs(name):
    """The grid's configurations, each a dict of wedlm options (without adapter/shift)."""
    g = GRIDS[name]
    out = []
    for t, l, w in g["stream"]:
        out.append({"mode": "stream", "select": "entropy", "tau": t, "lambda": l, "w": w})
    for t, l, w in g["block"]:
        out.append({"mode": "block", "select": "entropy", "tau": t, "lambda": l, "w": w})
    for sel, t, w in g["decoders"]:
        out.append({"mode": "stream", "select": sel, "tau": t, "w": w})
    for t, l, w, sm in g["smooth"]:
        out.append({"mode": "stream", "select": "entropy", "tau": t, "lambda": l, "w": w,
                    "smooth": sm})
    return out


def config_opts(cfg):
    """The policy options string of a configuration, in a fixed key order."""
    keys = ("mode", "select", "tau", "lambda", "w", "smooth")
    return ",".join("%s=%s" % (k, cfg[k] if isinstance(cfg[k], str) else fmt(cfg[k]))
                    for k in keys if k in cfg)


def config_id(cfg):
    """A file-name-safe id, e.g. stream-entropy-tau0.5-lambda0.1-w4."""
    parts = [cfg["mode"], cfg["select"]]
    for k in ("tau", "lambda", "w", "smooth"):
        if k in cfg:
            parts.append("%s%s" % (k, fmt(cfg[k])))
    return "-".join(parts)


def series_of(cfg):
    """The legend entry a configuration belongs to."""
    if cfg["mode"] == "block":
        return "block-wise (eq. 11)"
    if cfg.get("smooth"):
        return "streaming + IterSmooth"
    if cfg["select"] != "entropy":
        return "streaming, dInfer %s" % cfg["select"]
    return "streaming W=%d" % cfg["w"]


# --- one point --------------------------------------------------------------------------------

def point_from_ab(cfg, regime, ab):
    """A sweep point from `specd ab --json` output (a dict) for configuration cfg on regime."""
    o = ab["overall"]
    q = o.get("quality", {})
    p = {"id": config_id(cfg), "regime": regime, "series": series_of(cfg),
         "options": config_opts(cfg)}
    p.update(cfg)
    for k in ("tpf", "p_cache", "acceptance_rate", "mean_accepted_length", "speedup", "steps",
              "tokens_spec", "tokens_plain"):
        p[k] = o.get(k)
    for k in ("nll_plain", "nll_spec", "repeat_4gram_plain", "repeat_4gram_spec",
              "agreement_prefix", "agreement_positions", "task_pass_rate_plain",
              "task_pass_rate_spec", "tasks_passed_plain", "tasks_passed_spec", "tasks"):
        if k in q:
            p[k] = q[k]
    return p


def quality_of(p):
    """(value, higher_is_better, label) of the point's quality axis: the task pass rate when its
    regime has tasks, else the NLL of the output under the base model."""
    if p.get("task_pass_rate_spec") is not None:
        return p["task_pass_rate_spec"], True, "task pass rate"
    return p.get("nll_spec"), False, "NLL under the base model (nats/token)"


# --- Pareto front ---------------------------------------------------------------------------

def pareto_front(points, x_key, y_key, y_higher_better=True):
    """Indices of the points no other point dominates: higher x and better y (>= both, > one).
    Points with a missing or non-finite coordinate are never on the front."""
    def ok(v):
        return isinstance(v, (int, float)) and math.isfinite(v)

    def better_y(a, b):  # a at least as good as b
        return a >= b if y_higher_better else a <= b

    def strictly_y(a, b):
        return a > b if y_higher_better else a < b

    idx = [i for i, p in enumerate(points) if ok(p.get(x_key)) and ok(p.get(y_key))]
    front = []
    for i in idx:
        xi, yi = points[i][x_key], points[i][y_key]
        dominated = False
        for j in idx:
            if j == i:
                continue
            xj, yj = points[j][x_key], points[j][y_key]
            if xj >= xi and better_y(yj, yi) and (xj > xi or strictly_y(yj, yi)):
                dominated = True
                break
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][x_key])


def mark_fronts(points):
    """Sets p["pareto"] per regime on TPF vs that regime's quality axis."""
    for regime in sorted({p["regime"] for p in points}):
        sub = [p for p in points if p["regime"] == regime]
        for p in sub:
            p["pareto"] = False
        if not sub:
            continue
        _, higher, _ = quality_of(sub[0])
        key = "task_pass_rate_spec" if higher else "nll_spec"
        for i in pareto_front(sub, "tpf", key, higher):
            sub[i]["pareto"] = True


def comparisons(points):
    """Streaming vs block-wise TPF (and p_cache) at the same (select, tau, lambda, W, regime): the
    paper's Fig. 4c compares the two decoders at equal thresholds."""
    out = []
    key = lambda p: (p["regime"], p["select"], p.get("tau"), p.get("lambda"), p["w"])
    stream = {key(p): p for p in points if p["mode"] == "stream" and not p.get("smooth")}
    for b in points:
        if b["mode"] != "block":
            continue
        s = stream.get(key(b))
        if not s or not b.get("tpf") or not s.get("tpf"):
            continue
        out.append({"regime": b["regime"], "tau": b.get("tau"), "lambda": b.get("lambda"),
                    "w": b["w"], "tpf_stream": s["tpf"], "tpf_block": b["tpf"],
                    "tpf_ratio_stream_over_block": s["tpf"] / b["tpf"],
                    "p_cache_stream": s.get("p_cache"), "p_cache_block": b.get("p_cache"),
                    "quality_stream": quality_of(s)[0], "quality_block": quality_of(b)[0]})
    return out


def smoothing_gain(points):
    """IterSmooth on vs off at the same (tau, lambda, W, regime): TPF and quality of each."""
    out = []
    key = lambda p: (p["regime"], p["select"], p.get("tau"), p.get("lambda"), p["w"])
    plain = {key(p): p for p in points if p["mode"] == "stream" and not p.get("smooth")}
    for sm in points:
        if sm["mode"] != "stream" or not sm.get("smooth"):
            continue
        off = plain.get(key(sm))
        if not off or not sm.get("tpf") or not off.get("tpf"):
            continue
        out.append({"regime": sm["regime"], "tau": sm.get("tau"), "lambda": sm.get("lambda"),
                    "w": sm["w"], "smooth": sm["smooth"], "tpf_off": off["tpf"],
                    "tpf_on": sm["tpf"], "tpf_gain": sm["tpf"] / off["tpf"],
                    "quality_off": quality_of(off)[0], "quality_on": quality_of(sm)[0]})
    return out


# quality kept, relative to plain decoding's: pass rate >= f x plain's, or NLL <= plain's / f
MATCH_LEVELS = (1.0, 0.9, 0.75)


def matched_quality(points, plain_quality):
    """Per regime, series and level f: the highest TPF among the series' points whose quality is
    at least f of plain decoding's (for NLL: at most plain's / f, and a repeated-4-gram rate at
    most plain's / f + 0.01, since loops have low NLL), and the point that gives it:
    the decoders compared at matched quality. plain_quality maps a regime to plain's value."""
    out = []
    for regime in dict.fromkeys(p["regime"] for p in points):
        ref = plain_quality.get(regime)
        if not isinstance(ref, (int, float)):
            continue
        for series in sorted({p["series"] for p in points if p["regime"] == regime}):
            for f in MATCH_LEVELS:
                best = None
                for p in points:
                    if p["regime"] != regime or p["series"] != series:
                        continue
                    q, higher, _ = quality_of(p)
                    if not isinstance(q, (int, float)) or not isinstance(p.get("tpf"),
                                                                        (int, float)):
                        continue
                    ok = q >= f * ref if higher else q <= ref / f
                    if ok and not higher:
                        # a low NLL also rewards degenerate loops: the output must not repeat
                        # itself more than plain's does at this level (+0.01 for plain's zero)
                        r, rp = p.get("repeat_4gram_spec"), p.get("repeat_4gram_plain")
                        if isinstance(r, (int, float)) and isinstance(rp, (int, float)):
                            ok = r <= rp / f + 0.01
                    if ok and (best is None or p["tpf"] > best["tpf"]):
                        best = p
                out.append({"regime": regime, "series": series, "level": f,
                            "tpf": best["tpf"] if best else None,
                            "options": best["options"] if best else None,
                            "quality": quality_of(best)[0] if best else None})
    return out


# --- SVG ------------------------------------------------------------------------------------

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
          "#17becf", "#7f7f7f", "#bcbd22"]


def _nice_ticks(lo, hi, n=5):
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    span = hi - lo
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw), default=raw)
    # from the last tick at or below lo to the first at or above hi, so every value is inside
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(k * step, 10) for k in range(first, last + 1)]


def _panel(points, series, x0, y0, w, h, title, plain_ref):
    """One regime's scatter: TPF on x, its quality on y, the front joined by a line; a point's
    colour is its series' index in series (the legend's list, shared by every panel)."""
    e = html.escape
    _, higher, ylabel = quality_of(points[0])
    ykey = "task_pass_rate_spec" if higher else "nll_spec"
    xs = [p["tpf"] for p in points if isinstance(p.get("tpf"), (int, float))] + [1.0]
    ys = [p[ykey] for p in points if isinstance(p.get(ykey), (int, float))]
    if plain_ref is not None:
        ys.append(plain_ref)
    xt = _nice_ticks(min(xs), max(xs))
    if higher:
        yt = _nice_ticks(0.0, max(1.0, max(ys) if ys else 1.0)) if ys else [0, 0.5, 1]
        yt = [t for t in yt if t <= 1.0 + 1e-9] or [0, 1]
    else:
        yt = _nice_ticks(min(ys) if ys else 0.0, max(ys) if ys else 1.0)
    xmin, xmax, ymin, ymax = xt[0], xt[-1], yt[0], yt[-1]
    if xmax <= xmin:
        xmax = xmin + 1
    if ymax <= ymin:
        ymax = ymin + 1
    L, R, T, B = 70, 20, 40, 55  # margins inside the panel
    pw, ph = w - L - R, h - T - B

    def X(v):
        return x0 + L + (v - xmin) / (xmax - xmin) * pw

    def Y(v):
        return y0 + T + ph - (v - ymin) / (ymax - ymin) * ph

    s = ['<g font-family="sans-serif" font-size="12">',
         '<text x="%.1f" y="%.1f" font-size="15" font-weight="bold">%s</text>'
         % (x0 + L, y0 + 22, e(title)),
         '<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>'
         % (x0 + L, y0 + T, pw, ph)]
    for t in xt:
        s.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>'
                 % (X(t), y0 + T, X(t), y0 + T + ph))
        s.append('<text x="%.1f" y="%.1f" text-anchor="middle">%g</text>'
                 % (X(t), y0 + T + ph + 16, t))
    for t in yt:
        s.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>'
                 % (x0 + L, Y(t), x0 + L + pw, Y(t)))
        s.append('<text x="%.1f" y="%.1f" text-anchor="end">%g</text>'
                 % (x0 + L - 6, Y(t) + 4, t))
    s.append('<text x="%.1f" y="%.1f" text-anchor="middle">tokens per forward (TPF)</text>'
             % (x0 + L + pw / 2, y0 + h - 12))
    s.append('<text x="%.1f" y="%.1f" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">'
             '%s (%s)</text>' % (x0 + 18, y0 + T + ph / 2, x0 + 18, y0 + T + ph / 2, e(ylabel),
                                 "higher is better" if higher else "lower is better"))
    if plain_ref is not None:
        s.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" '
                 'stroke-dasharray="5,4"/>' % (x0 + L, Y(plain_ref), x0 + L + pw, Y(plain_ref)))
        s.append('<rect x="%.1f" y="%.1f" width="9" height="9" fill="#000"/>'
                 % (X(1.0) - 4.5, Y(plain_ref) - 4.5))
        s.append('<text x="%.1f" y="%.1f">plain decoding</text>'
                 % (X(1.0) + 8, Y(plain_ref) - 8))
    front = sorted([p for p in points if p.get("pareto")], key=lambda p: p["tpf"])
    if len(front) > 1:
        s.append('<polyline fill="none" stroke="#000" stroke-width="1.5" points="%s"/>'
                 % " ".join("%.1f,%.1f" % (X(p["tpf"]), Y(p[ykey])) for p in front))
    labels = {}
    for p in points:
        if not isinstance(p.get("tpf"), (int, float)) or not isinstance(p.get(ykey),
                                                                         (int, float)):
            continue
        c = COLORS[series.index(p["series"]) % len(COLORS)]
        cx, cy = X(p["tpf"]), Y(p[ykey])
        s.append('<circle cx="%.1f" cy="%.1f" r="5" fill="%s" fill-opacity="0.85">'
                 '<title>%s: TPF %.2f, %s %.3f, p_cache %s</title></circle>'
                 % (cx, cy, c, e(p["options"]), p["tpf"], e(ylabel), p[ykey],
                    "%.3f" % p["p_cache"] if isinstance(p.get("p_cache"), (int, float))
                    else "-"))
        if p.get("pareto"):
            s.append('<circle cx="%.1f" cy="%.1f" r="8.5" fill="none" stroke="#000" '
                     'stroke-width="1.5"/>' % (cx, cy))
            labels.setdefault((round(cx), round(cy)), []).append(short_label(p))
    # one label per front position (points with equal figures share it), right of the point or,
    # in the panel's right third, left of it; along the front, above and below in turn so that
    # neighbours' labels do not overlap
    for k, ((cx, cy), texts) in enumerate(sorted(labels.items())):
        left = cx > x0 + L + 0.66 * pw
        s.append('<text x="%.1f" y="%.1f" font-size="10" fill="#333" text-anchor="%s">%s</text>'
                 % (cx - 10 if left else cx + 10, cy - 7 if k % 2 == 0 else cy + 16,
                    "end" if left else "start", e(" | ".join(texts))))
    s.append("</g>")
    return s


def short_label(p):
    lab = []
    if p["mode"] == "block":
        lab.append("block")
    if p["select"] != "entropy":
        lab.append(p["select"])
    lab.append("\u03c4%s" % fmt(p["tau"]) if "tau" in p else "")
    if "lambda" in p:
        lab.append("\u03bb%s" % fmt(p["lambda"]))
    lab.append("W%d" % p["w"])
    if p.get("smooth"):
        lab.append("sm%s" % fmt(p["smooth"]))
    return " ".join(x for x in lab if x)


def write_svg(path, points, plain_refs, title):
    """One panel per regime (in the points' order), side by side, and one legend. plain_refs maps
    a regime to plain decoding's quality there (drawn as a dashed line and a square at TPF 1)."""
    regimes = list(dict.fromkeys(p["regime"] for p in points))
    pw, ph = 560, 420
    all_series = sorted({p["series"] for p in points})
    legend_h = 30 + 18 * (len(all_series) + 2)
    width = max(pw * max(len(regimes), 1), 900)
    pw = width / max(len(regimes), 1)  # one regime: the panel takes the whole width
    height = 50 + ph + legend_h
    body = []
    for i, r in enumerate(regimes):
        sub = [p for p in points if p["regime"] == r]
        body.extend(_panel(sub, all_series, i * pw, 40, pw, ph, "regime: %s" % r,
                           plain_refs.get(r)))
    ly = 40 + ph + 10
    leg = ['<g font-family="sans-serif" font-size="12">']
    for k, sname in enumerate(all_series):
        c = COLORS[k % len(COLORS)]
        leg.append('<circle cx="80" cy="%.1f" r="5" fill="%s"/><text x="92" y="%.1f">%s</text>'
                   % (ly + 18 * k, c, ly + 18 * k + 4, html.escape(sname)))
    k = len(all_series)
    leg.append('<circle cx="80" cy="%.1f" r="8.5" fill="none" stroke="#000" stroke-width="1.5"/>'
               '<text x="92" y="%.1f">Pareto front (black line): no other point has higher '
               'TPF and better quality</text>'
               % (ly + 18 * k, ly + 18 * k + 4))
    leg.append('<rect x="75.5" y="%.1f" width="9" height="9" fill="#000"/><text x="92" y="%.1f">'
               'plain decoding (TPF 1; dashed: its quality)</text>'
               % (ly + 18 * (k + 1) - 4.5, ly + 18 * (k + 1) + 4))
    leg.append("</g>")
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">'
           % (width, height, width, height),
           '<rect width="100%" height="100%" fill="#fff"/>',
           '<text x="20" y="26" font-family="sans-serif" font-size="17" font-weight="bold">%s'
           '</text>' % html.escape(title)]
    svg.extend(body)
    svg.extend(leg)
    svg.append("</svg>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(svg) + "\n")
