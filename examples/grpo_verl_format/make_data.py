"""Write train.parquet and val.parquet beside this file: arithmetic word problems in verl's schema.

    python examples/grpo_verl_format/make_data.py [--train 2000] [--val 128] [--seed 0] [--carry-drop 0.6]

Each row has verl's columns (what verl's ``examples/data_preprocess/gsm8k.py`` writes):

- ``data_source``: ``rlinf/arith_word``;
- ``prompt``: ``[{"role": "user", "content": "What is 23 + 58? End with #### and the number."}]``;
- ``ability``: ``math``;
- ``reward_model``: ``{"style": "rule", "ground_truth": "81"}``;
- ``extra_info``: ``{"split", "index", "answer_text"}`` (``answer_text`` is the reference worked
  answer, digit by digit: ``3 + 8 = 11, carry 1. 2 + 5 + 1 = 8. #### 81``);

plus ``response``, the demonstration ``rlinf sft`` trains on (``data.response_key``, default
``response``). In train.parquet it is a careless teacher's: with probability ``--carry-drop``
(0.6) it notes a carry or borrow and then forgets it (``3 + 8 = 11, carry 1. 2 + 5 = 7. #### 71``),
so the warm start learns the arithmetic and the slip, and only the reward (exact match with
``reward_model.ground_truth``, which is always right) tells them apart: what GRPO is for, as in
``grpo_arith.yaml``. In val.parquet it is the reference, so ``rlinf sft``'s exact match is the
accuracy GRPO starts from. A GRPO run reads the same files and scores with ``compute_score.py``
beside this file. The split is seeded, and no question of val.parquet is in train.parquet. Needs
pyarrow (a dependency of rlinf-algos).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

DATA_SOURCE = "rlinf/arith_word"
INSTRUCTION = "End with #### and the number."

# (template, operator): {a} and {b} are the operands, the answer is a + b or a - b
TEMPLATES = (
    ("What is {a} + {b}?", "+"),
    ("What is {a} - {b}?", "-"),
    ("Tom has {a} apples and buys {b} more. How many apples does he have?", "+"),
    ("A shelf holds {a} books. {b} are taken away. How many books are left?", "-"),
    ("Sara walks {a} meters, then {b} meters more. How far does she walk?", "+"),
    ("A box had {a} pens and {b} were sold. How many pens remain?", "-"),
)


def worked(a: int, b: int, op: str, drop: bool = False) -> tuple[str, int]:
    """The worked answer of ``a op b`` digit by digit, ones first, and the value it ends with:
    ``3 + 8 = 11, carry 1. 2 + 5 + 1 = 8. #### 81`` (or ``13 - 7 = 6, borrow 1. 9 - 1 - 1 = 7. #### 76``).

    ``drop``: the careless teacher's slip: it notes the carry (or borrow) and then forgets it in
    the tens, ``... carry 1. 2 + 5 = 7. #### 71``. Problems without a carry are unaffected."""
    a1, a0 = divmod(a, 10)
    b1, b0 = divmod(b, 10)
    if op == "+":
        ones, carry = (a0 + b0) % 10, a0 + b0 >= 10
        first = f"{a0} + {b0} = {a0 + b0}" + (", carry 1." if carry else ".")
        tens = a1 + b1 + (carry and not drop)
        second = f"{a1} + {b1}" + (" + 1" if carry and not drop else "") + f" = {tens}."
    else:
        carry = a0 < b0
        ones = a0 + 10 * carry - b0
        first = f"{a0 + 10 * carry} - {b0} = {ones}" + (", borrow 1." if carry else ".")
        tens = a1 - b1 - (carry and not drop)
        second = f"{a1} - {b1}" + (" - 1" if carry and not drop else "") + f" = {tens}."
    value = 10 * tens + ones
    return f"{first} {second} #### {value}", value


def problem(rng: random.Random, carry_drop: float = 0.0) -> tuple[str, str, str, int]:
    """``(question, reference worked answer, demonstration, answer)`` of one draw: two-digit
    operands, non-negative results. The demonstration is a careless teacher's: with probability
    ``carry_drop`` it forgets a carry or borrow (:func:`worked`); the answer is always right."""
    template, op = rng.choice(TEMPLATES)
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    if op == "-" and b > a:
        a, b = b, a
    reference, value = worked(a, b, op)
    slip = rng.random() < carry_drop
    demonstration = worked(a, b, op, drop=slip)[0]
    question = f"{template.format(a=a, b=b)} {INSTRUCTION}"
    return question, reference, demonstration, value


def rows(n: int, split: str, rng: random.Random, taken: set[str], carry_drop: float = 0.0) -> list[dict]:
    """``n`` rows of distinct questions not in ``taken`` (which they are added to); their
    ``response`` is the careless teacher's (``carry_drop``), ``extra_info.answer_text`` the
    reference."""
    out: list[dict] = []
    while len(out) < n:
        question, reference, demonstration, value = problem(rng, carry_drop)
        if question in taken:
            continue
        taken.add(question)
        out.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": question}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(value)},
                "extra_info": {"split": split, "index": len(out), "answer_text": reference},
                "response": demonstration,
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, default=2000, help="training rows")
    ap.add_argument("--val", type=int, default=128, help="validation rows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--carry-drop", type=float, default=0.6, help="how often the training demonstrations forget a carry"
    )
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="output folder")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    taken: set[str] = set()
    val = rows(args.val, "test", rng, taken)  # drawn first, so the validation set does not
    train = rows(args.train, "train", rng, taken, args.carry_drop)  # depend on the training rows
    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in (("train", train), ("val", val)):
        path = args.out / f"{name}.parquet"
        pq.write_table(pa.Table.from_pylist(data), path, compression="zstd")
        print(f"{path}: {len(data)} rows, {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
