#!/usr/bin/env python3
"""Unit test of the sweep's pure parts (bench/dlm/pareto_lib.py): the Pareto front, reading a
`specd ab --json` into a point, the streaming/block-wise pairing and the SVG. No model; the
expected fronts are worked out by hand below. Run: python3 bench/dlm/test_pareto.py"""

import os
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pareto_lib as pl  # noqa: E402


def ab_json(tpf, p_cache, pass_rate=None, nll=1.0, rep4=0.05):
    q = {"nll_plain": 0.6, "nll_spec": nll, "repeat_4gram_plain": 0.04,
         "repeat_4gram_spec": rep4, "agreement_prefix": 0.2, "agreement_positions": 0.3}
    if pass_rate is not None:
        q.update({"task_pass_rate_plain": 0.6, "task_pass_rate_spec": pass_rate,
                  "tasks_passed_plain": 18, "tasks_passed_spec": int(round(pass_rate * 30)),
                  "tasks": 30})
    return {"overall": {"tpf": tpf, "p_cache": p_cache, "acceptance_rate": 1.0,
                        "mean_accepted_length": tpf, "speedup": 0.5, "steps": 100,
                        "tokens_spec": int(100 * tpf), "tokens_plain": 120, "quality": q}}


class Front(unittest.TestCase):
    def test_higher_is_better(self):
        pts = [{"x": 1.0, "y": 0.9},   # 0: best quality: on the front
               {"x": 2.0, "y": 0.8},   # 1: on
               {"x": 1.5, "y": 0.7},   # 2: dominated by 1
               {"x": 3.0, "y": 0.5},   # 3: fastest: on
               {"x": 3.0, "y": 0.4},   # 4: same x, worse y: dominated by 3
               {"x": 2.0, "y": 0.8},   # 5: equal to 1: neither dominates the other
               {"x": None, "y": 1.0},  # 6: missing x: never on the front
               {"x": float("nan"), "y": 1.0}]
        self.assertEqual(pl.pareto_front(pts, "x", "y", True), [0, 1, 5, 3])

    def test_lower_is_better(self):
        pts = [{"x": 1.0, "y": 0.5}, {"x": 2.0, "y": 0.4}, {"x": 3.0, "y": 0.9},
               {"x": 2.5, "y": 1.0}]
        # 0 is dominated by 1 (faster and lower NLL); 3 by 2
        self.assertEqual(pl.pareto_front(pts, "x", "y", False), [1, 2])


class Points(unittest.TestCase):
    def setUp(self):
        cfgs = [{"mode": "stream", "select": "entropy", "tau": 0.3, "lambda": 0.1, "w": 4},
                {"mode": "stream", "select": "entropy", "tau": 0.9, "lambda": 0.1, "w": 4},
                {"mode": "block", "select": "entropy", "tau": 0.9, "lambda": 0.1, "w": 4},
                {"mode": "stream", "select": "credit", "tau": 0.7, "w": 4}]
        runs = [ab_json(1.2, 0.2, 0.55), ab_json(1.8, 0.3, 0.40), ab_json(1.0, 0.15, 0.45),
                ab_json(1.5, 0.25, 0.30)]
        self.points = [pl.point_from_ab(c, "tasks", r) for c, r in zip(cfgs, runs)]
        self.points.append(pl.point_from_ab(cfgs[0], "prose", ab_json(1.1, 0.18, None, 0.9)))
        self.points.append(pl.point_from_ab(cfgs[1], "prose", ab_json(1.4, 0.2, None, 1.3)))
        pl.mark_fronts(self.points)

    def test_point_fields(self):
        p = self.points[0]
        self.assertEqual(p["options"], "mode=stream,select=entropy,tau=0.3,lambda=0.1,w=4")
        self.assertEqual(p["id"], "stream-entropy-tau0.3-lambda0.1-w4")
        self.assertEqual((p["tpf"], p["p_cache"], p["task_pass_rate_spec"]), (1.2, 0.2, 0.55))
        self.assertEqual(pl.quality_of(p)[1], True)
        self.assertEqual(pl.quality_of(self.points[4])[:2], (0.9, False))

    def test_fronts_per_regime(self):
        # tasks: 0 (0.55 @ 1.2) and 1 (0.40 @ 1.8) are on; block (0.45 @ 1.0) is dominated by 0,
        # credit (0.30 @ 1.5) by 1. prose: lower NLL is better, so both points are on.
        self.assertEqual([p["pareto"] for p in self.points], [True, True, False, False, True,
                                                              True])

    def test_stream_vs_block(self):
        c = pl.comparisons(self.points)
        self.assertEqual(len(c), 1)
        self.assertAlmostEqual(c[0]["tpf_ratio_stream_over_block"], 1.8)
        self.assertEqual((c[0]["tau"], c[0]["w"]), (0.9, 4))

    def test_smoothing_gain(self):
        sm = pl.point_from_ab({"mode": "stream", "select": "entropy", "tau": 0.9, "lambda": 0.1,
                               "w": 4, "smooth": 0.3}, "tasks", ab_json(2.7, 0.4, 0.35))
        g = pl.smoothing_gain(self.points + [sm])
        self.assertEqual(len(g), 1)
        self.assertAlmostEqual(g[0]["tpf_gain"], 1.5)  # 2.7 over the same point's 1.8
        self.assertEqual((g[0]["quality_off"], g[0]["quality_on"]), (0.40, 0.35))

    def test_matched_quality(self):
        m = {(r["regime"], r["series"], r["level"]): r
             for r in pl.matched_quality(self.points, {"tasks": 0.6, "prose": 1.0})}
        # tasks, plain 0.6: at 0.75 (>= 0.45) streaming W=4 keeps only tau 0.3 (0.55 @ 1.2);
        # block-wise's 0.45 passes at 0.75; nothing reaches plain's 0.6
        self.assertEqual(m[("tasks", "streaming W=4", 0.75)]["tpf"], 1.2)
        self.assertEqual(m[("tasks", "block-wise (eq. 11)", 0.75)]["tpf"], 1.0)
        self.assertIsNone(m[("tasks", "streaming W=4", 1.0)]["tpf"])
        self.assertIsNone(m[("tasks", "streaming, dInfer credit", 0.75)]["tpf"])
        # prose, plain NLL 1.0: at 0.75 (NLL <= 1.333) both points pass, the faster wins
        self.assertEqual(m[("prose", "streaming W=4", 0.75)]["tpf"], 1.4)
        self.assertEqual(m[("prose", "streaming W=4", 1.0)]["tpf"], 1.1)

    def test_matched_quality_refuses_loops(self):
        # a low NLL from repeating itself is not matched quality: the 4-gram rate must stay
        # within plain's (0.04) / level + 0.01
        cfg = {"mode": "stream", "select": "entropy", "tau": 0.5, "lambda": 0.1, "w": 4}
        loop = pl.point_from_ab(cfg, "prose", ab_json(2.0, 0.3, nll=0.5, rep4=0.4))
        fine = pl.point_from_ab(dict(cfg, tau=0.2), "prose", ab_json(1.3, 0.3, nll=0.9))
        m = {r["level"]: r for r in pl.matched_quality([loop, fine], {"prose": 1.0})}
        self.assertEqual(m[1.0]["tpf"], 1.3)

    def test_svg(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.svg")
            pl.write_svg(path, self.points, {"tasks": 0.6, "prose": 0.6}, "test sweep")
            root = ET.parse(path).getroot()  # well-formed XML
            text = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
            for want in ("tokens per forward (TPF)", "task pass rate", "NLL under the base model",
                         "regime: tasks", "regime: prose", "block-wise (eq. 11)",
                         "streaming W=4", "streaming, dInfer credit", "Pareto front",
                         "plain decoding"):
                self.assertIn(want, text)
            circles = list(root.iter("{http://www.w3.org/2000/svg}circle"))
            rings = [c for c in circles if c.get("fill") == "none"]
            self.assertEqual(len(rings), 4 + 1)  # the front's points and the legend's ring
            self.assertEqual(len(circles) - len(rings), 6 + 3)  # the points, the legend dots


class Grids(unittest.TestCase):
    def test_grids(self):
        self.assertEqual(len(pl.grid_configs("quick")), 3)
        d = pl.grid_configs("default")
        self.assertEqual(len(d), 12)
        self.assertEqual({c["mode"] for c in d}, {"stream"})
        self.assertEqual(len({pl.config_id(c) for c in pl.grid_configs("full")}),
                         len(pl.grid_configs("full")))


if __name__ == "__main__":
    unittest.main()
