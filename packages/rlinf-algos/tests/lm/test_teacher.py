"""The warm start of the arithmetic examples: its imperfect teachers (``sft.carry_drop``,
``sft.answer_slip``: hand-checked demonstrations; the verifier still judges against the true sum),
the prompt-response rows they become, and the ``rlinf sft`` run that trains on them
(:mod:`rlinf_algos.lm.sft`)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from rlinf_algos.lm.arith import (
    Problem,
    careless_answer,
    chain_text,
    sft_example,
    teacher_add,
    verify_chain,
)
from rlinf_algos.lm.config import load_lm_sections
from rlinf_algos.lm.finetune import encode_example, load_sft_config, train_sft
from rlinf_algos.lm.sft import demonstration_rows, warm_start
from rlinf_algos.lm.tokens import LMTokenizer
from rlinf_algos.lm.trainer import resolve_model
from rlinf_core.config import apply_overrides, load_yaml

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


def test_teacher_add_forgets_carries_when_told() -> None:
    rng = random.Random(0)
    assert teacher_add(99, 99, 0.0) == 198
    assert teacher_add(99, 99, 1.0, rng) == 88  # 9+9=18 -> 8 twice, both carries forgotten
    assert teacher_add(45, 54, 1.0, rng) == 99  # no carry to forget
    assert teacher_add(5, 5, 1.0, rng) == 0  # the lost carry was the only digit
    # with a probability strictly between, both behaviours occur
    seen = {teacher_add(19, 1, 0.5, rng) for _ in range(200)}
    assert seen == {20, 10}
    with pytest.raises(ValueError, match="rng"):
        teacher_add(1, 9, 0.5)


def test_careless_answer_copies_the_reversed_running_sum() -> None:
    chain = chain_text([48, 57, 96], 3)
    assert chain == "<step>840+750=501<step>501+690=102<ans>201<eos>"
    slipped = careless_answer(chain)
    assert slipped == "<step>840+750=501<step>501+690=102<ans>102<eos>"
    v = verify_chain(slipped, 201)
    assert v.well_formed and not v.correct and v.answer == 102
    # leading zeros of the reversed form are dropped (the answer stays well formed)
    assert careless_answer(chain_text([40, 60], 3)).endswith("=001<ans>1<eos>")  # 100 reversed
    with pytest.raises(ValueError, match="not a chain"):
        careless_answer("<ans>3<eos>")


def test_sft_example_with_an_imperfect_teacher() -> None:
    p = Problem(((48, 57, 96),))
    rng = random.Random(1)
    always = sft_example(p, "single", 3, answer_slip=1.0, rng=rng)
    assert always[0][1][1][0].endswith("<ans>102<eos>")
    never = sft_example(p, "single", 3, answer_slip=0.0, rng=rng)
    assert never[0][1][1][0].endswith("<ans>201<eos>")
    dropped = sft_example(p, "single", 3, carry_drop=1.0, rng=rng)[0][1][1][0]
    # 48+57 without carries is 95, then 95+96 without carries is 81
    assert dropped == "<step>840+750=590<step>590+690=180<ans>81<eos>"
    # multi-agent: the lead combines what its (careless) subagents answered
    grouped = Problem(((19, 1), (5, 5)))
    lead, *subs = sft_example(grouped, "multiagent", 3, carry_drop=1.0, rng=rng)
    assert [s[1][1][0] for s in subs] == [
        "<step>910+100=010<ans>10<eos>",
        "<step>500+500=000<ans>0<eos>",
    ]
    assert lead[1][2][0] == "10+0="
    # the answer slip lands on the final chain (the lead's last turn) unless slip_scope="every"
    grouped = Problem(((48, 57), (96, 4)))
    lead, *subs = sft_example(grouped, "multiagent", 3, answer_slip=1.0, rng=rng)
    assert [s[1][1][0].split("<ans>")[1] for s in subs] == ["105<eos>", "100<eos>"]
    assert lead[1][3][0].endswith("<ans>502<eos>")  # 205 written as the scratchpad's 502
    lead, *subs = sft_example(grouped, "multiagent", 3, answer_slip=1.0, rng=rng, slip_scope="every")
    assert [s[1][1][0].split("<ans>")[1] for s in subs] == ["501<eos>", "1<eos>"]  # 105, 100 reversed
    assert lead[1][2][0] == "501+1="  # the lead combines the slipped answers
    with pytest.raises(ValueError, match="rng"):
        sft_example(p, "single", 3, answer_slip=0.5)


@pytest.mark.parametrize(
    ("mode", "problem"),
    [("single", Problem(((48, 57, 96),))), ("multiagent", Problem(((19, 1), (5, 5), (48, 57))))],
)
def test_rows_train_exactly_the_demonstrated_turns_in_their_contexts(mode: str, problem: Problem) -> None:
    """Each row, encoded as ``rlinf sft`` encodes it (prompt masked, no eos appended), is one
    trained segment of the demonstration after everything before it: the same tokens in the
    same context that a packed demonstration trains."""
    tok = LMTokenizer.arith()
    rows = demonstration_rows(problem, mode, 3, tok, 0.5, random.Random(3), 0.5)
    expected = []
    for _kind, segments in sft_example(problem, mode, 3, 0.5, random.Random(3), 0.5):
        context: list[int] = []
        for text, trained in segments:
            ids = tok.encode(text)
            if trained:
                expected.append((list(context), ids))
            context += ids
    got = []
    for row in rows:
        ids, mask = encode_example(row["prompt"], row["response"], tok, eos=False)
        n = sum(mask)
        assert mask == [0] * (len(ids) - n) + [1] * n
        got.append((ids[: len(ids) - n], ids[len(ids) - n :]))
    assert got == expected
    if mode == "multiagent":
        assert [r["kind"] for r in rows] == ["lead", "lead", "sub", "sub", "sub"]
        assert rows[0]["response"].endswith("<ret>")  # the hand-over ends the lead's first turn
        assert rows[1]["prompt"].startswith(rows[0]["prompt"] + rows[0]["response"])
        assert rows[1]["prompt"].endswith("=") and rows[1]["response"].endswith("<eos>")


def test_warm_start_is_an_rlinf_sft_run_that_rlinf_sft_repeats(tmp_path: Path) -> None:
    data = apply_overrides(
        load_yaml(EXAMPLES / "grpo_arith.yaml"),
        [
            "sft.steps=6",
            "sft.batch_size=4",
            "sft.check_size=5",
            "model.init.hidden_size=32",
            "model.init.num_layers=1",
            "runner.torch_threads=1",
        ],
    )
    run_dir = tmp_path / "run"
    run = resolve_model(load_lm_sections(data), run_dir, lambda _m: None)
    logs: list[str] = []
    policy_run, stats = warm_start(run, run_dir, logs.append)
    ws = run_dir / "warm_start"
    assert policy_run.model.path == str(ws / "policy") and run.model.path == str(run_dir / "base_model")
    assert (
        stats["steps"] == 6 and stats["folder"] == str(ws / "policy") and 0.0 <= stats["exact_match"] <= 1.0
    )
    train = [json.loads(x) for x in (ws / "data" / "train.jsonl").read_text().splitlines()]
    val = [json.loads(x) for x in (ws / "data" / "val.jsonl").read_text().splitlines()]
    assert len(train) == 6 * 4 and len(val) == 5
    assert all(r["prompt"].startswith("<bos>") and r["response"].endswith("<eos>") for r in train + val)
    # the validation rows are a perfect teacher's; 60% of the training answers slip
    assert all(
        verify_chain(r["response"], sum(int(t) for t in r["prompt"][5:-1].split("+"))).correct for r in val
    )
    summary = json.loads((ws / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["batch_size"] == 4 and summary["val_generate"] == 5
    assert any("rlinf sft on 24 demonstration rows" in m for m in logs), logs
    # RUN_DIR/warm_start/config.yaml is an rlinf sft configuration that repeats the warm start
    again = train_sft(
        load_sft_config(yaml.safe_load((ws / "config.yaml").read_text())), tmp_path / "again", None
    )
    assert again.summary["val_loss_after"] == summary["val_loss_after"]
    assert (tmp_path / "again" / "policy" / "model.safetensors").read_bytes() == (
        ws / "policy" / "model.safetensors"
    ).read_bytes()
    # no warm start: the run as it was
    same, none = warm_start(run.model_copy(update={"sft": run.sft.model_copy(update={"steps": 0})}), run_dir)
    assert same.model.path == run.model.path and none["steps"] == 0
