"""Tokenizer, task formats, the exact verifier and the LLM GRPO config models."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from rlinf_algos.lm.arith import (
    Problem,
    ProblemSampler,
    chain_text,
    final_answer,
    heldout_problems,
    parse_calls,
    prompt_text,
    sft_example,
    step_width,
    verify_chain,
)
from rlinf_algos.lm.config import ArithTaskConfig, LMModelConfig, load_lm_sections
from rlinf_algos.lm.tokens import ARITH_CHARS, ARITH_SPECIALS, LMTokenizer, TokenizerError
from rlinf_core.errors import ConfigError

TOK = LMTokenizer.arith()
ID = {t: TOK.token_id(t) for t in (*ARITH_SPECIALS, *ARITH_CHARS)}


# --- tokenizer -------------------------------------------------------------------------------


def test_tokenizer_round_trip_every_symbol_and_random_texts() -> None:
    pieces = list(ARITH_SPECIALS) + list(ARITH_CHARS)
    rng = random.Random(0)
    for _ in range(200):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        ids = TOK.encode(text)
        assert TOK.decode(ids, skip_pad=False) == text
        assert len(ids) == sum(1 for _ in ids)
    assert TOK.vocab_size == len(ARITH_SPECIALS) + 14 == len(set(ID.values()))
    assert TOK.pad_id == 0 and TOK.encode("<step>12", bos=True) == [
        TOK.bos_id,
        ID["<step>"],
        ID["1"],
        ID["2"],
    ]
    assert TOK.decode([TOK.pad_id, ID["7"], TOK.pad_id]) == "7"


def test_tokenizer_round_trip_of_reference_solutions() -> None:
    cfg = ArithTaskConfig(mode="multiagent")
    for p in heldout_problems(cfg)[:20]:
        for _kind, segs in sft_example(p, "multiagent", step_width(cfg)):
            text = "".join(t for t, _ in segs)
            assert TOK.decode(TOK.encode(text)) == text


def test_tokenizer_rejects_unknown_text_with_its_offset() -> None:
    for text in ("12x", "1<foo>", "<step"):
        with pytest.raises(TokenizerError, match="cannot encode"):
            TOK.encode(text)
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        TOK.decode([TOK.vocab_size])


# --- formats -----------------------------------------------------------------------------------


def test_chain_text_steps_are_the_running_sums() -> None:
    assert chain_text([48, 317, 92], 4) == "<step>8400+7130=5630<step>5630+2900=7540<ans>457<eos>"
    assert (
        chain_text([48, 317, 92], 4, reverse=False) == "<step>0048+0317=0365<step>0365+0092=0457<ans>457<eos>"
    )
    with pytest.raises(ValueError):
        chain_text([5], 2)


def test_prompts_and_step_width() -> None:
    assert prompt_text(Problem(((48, 317, 92),))) == "48+317+92="
    assert prompt_text(Problem(((1, 2), (30, 4)))) == "(1+2)+(30+4)="
    assert step_width(ArithTaskConfig(num_terms=[3, 4], max_digits=3)) == 4  # 4 * 999 = 3996
    assert step_width(ArithTaskConfig(mode="flat", num_groups=3, num_terms=[4], max_digits=2)) == 4  # 1188


def test_heldout_set_is_fixed_distinct_and_excluded_from_training() -> None:
    cfg = ArithTaskConfig(eval_size=50, num_terms=[2], min_digits=1, max_digits=1)
    a, b = heldout_problems(cfg), heldout_problems(cfg)
    assert a == b and len(set(a)) == 50
    train = ProblemSampler(cfg, seed=3, exclude=a).sample(500)
    assert not set(train) & set(a)
    assert heldout_problems(cfg.model_copy(update={"eval_seed": 1})) != a


# --- verifier ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "reward", "well_formed", "correct"),
    [
        ("<step>8400+7130=5630<step>5630+2900=7540<ans>457<eos>", 1.0, True, True),  # exact
        ("<step>1+1=2<ans>457<eos>", 1.0, True, True),  # steps are format-checked only
        ("<step>8400+7130=5630<ans>456<eos>", 0.0, True, False),  # wrong answer
        ("<step>8400+7130=5630<ans>0457<eos>", 0.0, False, False),  # leading zero: not exact
        ("<step>8400+7130=5630<ans>457", 0.0, False, False),  # partial: no <eos>
        ("<step>8400+7130=5630<ans><eos>", 0.0, False, False),  # empty answer
        ("<ans>457<eos>", 0.0, False, False),  # no step
        ("<step>8400+7130=<ans>457<eos>", 0.0, False, False),  # truncated step
        ("<step>8400+7130=5630<ans>457<eos><eos>", 0.0, False, False),  # trailing tokens
        ("457<eos>", 0.0, False, False),
        ("", 0.0, False, False),
        ("<call>1+2<call>3+4<ret>", 0.0, False, False),
    ],
)
def test_verify_chain_edge_cases(response: str, reward: float, well_formed: bool, correct: bool) -> None:
    v = verify_chain(response, 457)
    assert (v.reward, v.well_formed, v.correct) == (reward, well_formed, correct)
    assert v.reason


def test_verify_chain_format_reward_only_for_well_formed_wrong_answers() -> None:
    assert verify_chain("<step>1+1=2<ans>3<eos>", 2, format_reward=0.1).reward == pytest.approx(0.1)
    assert verify_chain("<step>1+1=2<ans>2<eos>", 2, format_reward=0.1).reward == 1.0
    assert verify_chain("<step>1+1=2<ans>2", 2, format_reward=0.1).reward == 0.0
    assert final_answer("<step>1+1=2<ans>2<eos>") == 2
    assert final_answer("<step>1+1=2<ans>2") is None


def test_verify_accepts_every_reference_solution() -> None:
    for mode in ("single", "flat"):
        cfg = ArithTaskConfig(mode=mode)
        w = step_width(cfg)
        for p in heldout_problems(cfg)[:50]:
            assert verify_chain(chain_text(p.terms, w), p.answer).reward == 1.0


def test_parse_calls() -> None:
    assert parse_calls("<call>12+34<call>5+6+7<ret>", 8) == (["12+34", "5+6+7"], "ok")
    assert parse_calls("<call>12+34<call>5+6", 8)[0] is None  # no <ret>
    assert parse_calls("<call>12+34<ret>", 8)[0] is None  # one call
    assert parse_calls("<call>12+<call>5+6<ret>", 8)[0] is None  # not a sum
    assert parse_calls("<call>12<call>5+6<ret>", 8)[0] is None  # a single number
    assert parse_calls("<call>1+2<call>3+4<call>5+6<ret>", 2) == (None, "3 calls, more than max_calls=2")


# --- config ------------------------------------------------------------------------------------


def test_config_errors_name_their_yaml_paths() -> None:
    with pytest.raises(ConfigError) as ei:
        load_lm_sections(
            {
                "algorithm": {"name": "grpo_lm", "group_size": 1, "bogus": 3},
                "model": {"d_model": 100, "n_heads": 3},
                "task": {"min_digits": 3, "max_digits": 2},
                "runner": {"torch_threads": 0},
            }
        )
    text = str(ei.value)
    for path in ("algorithm.group_size", "algorithm.bogus", "model:", "task:", "runner.torch_threads"):
        assert path in text, text
    with pytest.raises(ConfigError, match="algorithm: missing section"):
        load_lm_sections({})
    run = load_lm_sections({"algorithm": {"name": "grpo_lm"}})
    assert run.model == LMModelConfig() and run.task.mode == "single"


def test_example_yamls_validate() -> None:
    from pathlib import Path

    from rlinf_core.config import load_yaml

    root = Path(__file__).resolve().parents[4] / "examples"
    for name in ("grpo_arith.yaml", "grpo_multiagent.yaml"):
        run = load_lm_sections(load_yaml(root / name))
        assert run.algorithm.name == "grpo_lm"


def test_reward_side_imports_without_torch() -> None:
    code = (
        "import sys\n"
        "import rlinf_algos.lm.reward, rlinf_algos.lm.agents, rlinf_algos.lm.algorithm\n"
        "bad = [m for m in ('torch', 'ray', 'mujoco', 'gymnasium') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
