"""``benchmarks/agent_vs_trl.py`` (rlinf's tool-calling GRPO beside TRL's
``GRPOTrainer(tools=[search])``): the pieces TRL is handed are rlinf's (the same search results,
the same exact-match verdicts), and ``--quick`` runs both sides end to end, one iteration each,
so the benchmark cannot rot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
BENCHMARK = "agent_vs_trl"  # the `bench` fixture (tests/conftest.py) imports it


def test_trl_reward_is_the_examples_exact_match(bench):
    from rlinf_algos.lm.agentic.multihop import ANSWER_PATTERN
    from rlinf_algos.lm.rewards import ExactMatchReward

    rlinf = ExactMatchReward(normalize=True, pattern=ANSWER_PATTERN)
    answers = ["Nomamgrad", "Feirford", "Romvik", "Romvik"]
    texts = ["The answer is nomamgrad.", "The answer is Romvik.", "Romvik", "the answer is THE Romvik!"]
    completions = [
        [{"role": "assistant", "content": "", "tool_calls": [{}]}, {"role": "assistant", "content": t}]
        for t in texts
    ]
    got = bench.exact_match_reward(completions, answer=answers)
    assert got == [rlinf.score(t, a) for t, a in zip(texts, answers, strict=True)] == [1.0, 0.0, 0.0, 1.0]
    # an episode that ends on a tool call (no answer turn) scores 0
    assert bench.exact_match_reward([[{"role": "assistant", "content": ""}]], answer=["x"]) == [0.0]


def test_trl_search_tool_is_rlinfs_builtin(bench, tmp_path):
    from rlinf_algos.tools.registry import function_schema
    from rlinf_algos.tools.search import Search

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        '{"id": "d1", "text": "Veltrix was founded by Ana Lors."}\n'
        '{"id": "d2", "text": "Ana Lors was born in Romvik."}\n'
        '{"id": "d3", "text": "Romvik is a city."}\n',
        encoding="utf-8",
    )
    fn = bench.search_tool(str(corpus), top_k=2)
    builtin = Search(str(corpus), top_k=2)
    for q in ("Veltrix founder", "Ana Lors born", "nothing here"):
        assert fn(q) == builtin.search(q)
    assert function_schema(fn) == function_schema(builtin.search)


@pytest.mark.slow
def test_quick_runs_both_sides(tmp_path):
    pytest.importorskip("trl")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        [sys.executable, str(BENCH / "agent_vs_trl.py"), "--quick", "--json", str(tmp_path / "out.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    import json

    rep = json.loads((tmp_path / "out.json").read_text())
    assert rep["same_prompt_ids"] == [True]
    assert {r["side"] for r in rep["figures"]} == {"rlinf", "trl"}
    for r in rep["per_seed"]:
        assert r["iterations"] == 1 and r["samples_per_s"] > 0
