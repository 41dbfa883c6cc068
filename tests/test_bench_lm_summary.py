"""The arithmetic behind ``benchmarks/grpo_lm_vs_trl.py``'s figures (what the record in
``benchmarks/results/`` claims), on synthetic runs: equal wall time is the shorter side's
training time, scores are linear between evaluations, and when rlinf runs more iterations
(``--rlinf-iterations``) the per-iteration column still reads both sides at the shared count."""

from __future__ import annotations

import pytest

BENCHMARK = "grpo_lm_vs_trl"  # the `bench` fixture (tests/conftest.py) imports it


def _run(iterations: int, s_per_iter: float, scores: dict[int, float]) -> dict:
    """A run of ``iterations`` equal iterations, evaluated at the iterations in ``scores``."""
    iters = [
        {
            "iteration": i,
            "iter_s": s_per_iter,
            "train_s": i * s_per_iter,
            "samples": 128,
            "generated_tokens": 128 * 25,
            "generate_s": s_per_iter / 3,
            "update_s": s_per_iter / 2,
        }
        for i in range(1, iterations + 1)
    ]
    evals = [{"iteration": i, "train_s": i * s_per_iter, "score": v, "exact": v} for i, v in scores.items()]
    return {"iters": iters, "evals": evals, "startup_s": 1.0}


def test_equal_wall_is_the_shorter_sides_time_with_linear_scores(bench):
    runs = {
        ("full", "rlinf", 0): _run(40, 2.0, {0: 0.6, 20: 0.7, 40: 0.8}),
        ("full", "trl", 0): _run(40, 3.0, {0: 0.6, 20: 0.75, 40: 0.9}),
    }
    cfg = {"seeds": [0], "iterations": 40, "rlinf_iterations": 40}
    out = bench.summarise(runs, cfg)
    rows = {r["side"]: r for r in out["rows"]}
    # rlinf ends at 80 s; TRL at 80 s is 2/3 of the way from 60 s (0.75) to 120 s (0.9)
    assert rows["rlinf"]["equal wall s"] == rows["trl"]["equal wall s"] == 80.0
    assert rows["rlinf"]["val at equal wall"] == pytest.approx(0.8)
    assert rows["trl"]["val at equal wall"] == pytest.approx(0.75 + 0.15 * 20 / 60)
    assert rows["rlinf"]["x TRL samples/s"] == pytest.approx(1.5)
    assert rows["trl"]["val after 40 iters"] == pytest.approx(0.9)
    # rlinf's curve is a straight line from 0.6 to 0.8 over the window: its mean is 0.7
    assert rows["rlinf"]["mean val to equal wall"] == pytest.approx(0.7, abs=1e-3)


def test_more_rlinf_iterations_move_equal_wall_to_trls_end(bench):
    runs = {
        ("full", "rlinf", 0): _run(80, 2.0, {0: 0.6, 40: 0.8, 60: 0.85, 80: 0.95}),
        ("full", "trl", 0): _run(40, 3.0, {0: 0.6, 40: 0.9}),
    }
    cfg = {"seeds": [0], "iterations": 40, "rlinf_iterations": 80}
    out = bench.summarise(runs, cfg)
    rows = {r["side"]: r for r in out["rows"]}
    assert rows["rlinf"]["equal wall s"] == 120.0  # TRL's whole run
    assert rows["rlinf"]["val at equal wall"] == pytest.approx(0.85)  # rlinf's 60th iteration
    assert rows["trl"]["val at equal wall"] == pytest.approx(0.9)
    assert rows["rlinf"]["iterations"] == 80 and rows["trl"]["iterations"] == 40
    # the per-iteration column reads each side after the shared 40, not rlinf's last evaluation
    assert rows["rlinf"]["val after 40 iters"] == pytest.approx(0.8)
    curve = next(p["curve"] for p in out["per_seed"] if p["side"] == "rlinf")
    assert curve[-1] == [80, 160.0, 0.95]


@pytest.mark.parametrize("quick", [False, True])
def test_both_sides_run_the_same_iterations_unless_asked(bench, quick):
    """--quick once left rlinf at grpo.yaml's 40 iterations beside TRL's 4."""
    cfg = bench.settings(quick)
    assert cfg["rlinf_iterations"] == cfg["iterations"] == (4 if quick else 40)
