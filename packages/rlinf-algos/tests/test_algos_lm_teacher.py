"""The imperfect teachers of the warm start (``sft.carry_drop``, ``sft.answer_slip``): hand-checked
demonstrations, and that the verifier still judges against the true sum."""

from __future__ import annotations

import random

import pytest

from rlinf_algos.lm.task import (
    Problem,
    careless_answer,
    chain_text,
    sft_example,
    teacher_add,
    verify_chain,
)


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
