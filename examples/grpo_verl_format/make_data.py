"""Write train.parquet and val.parquet beside this file: arithmetic word problems in verl's schema.

    python examples/grpo_verl_format/make_data.py [--train 2000] [--val 128] [--seed 0]

Each row has verl's columns (what verl's ``examples/data_preprocess/gsm8k.py`` writes):

- ``data_source``: ``rlinf/arith_word``;
- ``prompt``: ``[{"role": "user", "content": "What is 23 + 58? End with #### and the number."}]``;
- ``ability``: ``math``;
- ``reward_model``: ``{"style": "rule", "ground_truth": "81"}``;
- ``extra_info``: ``{"split", "index", "answer_text"}`` (``answer_text`` is the worked answer);

plus ``response``, the worked answer ``23 + 58 = 81 #### 81``, which ``rlinf sft`` trains on
(``data.response_key``, default ``response``). A GRPO run reads the same files and scores with
``compute_score.py`` beside this file. The split is seeded, and no question of val.parquet is in
train.parquet. Needs pyarrow (a dependency of rlinf-algos).
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


def problem(rng: random.Random) -> tuple[str, str, int]:
    """``(question, worked answer, answer)`` of one draw: two-digit operands, non-negative results."""
    template, op = rng.choice(TEMPLATES)
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    if op == "-" and b > a:
        a, b = b, a
    value = a + b if op == "+" else a - b
    question = f"{template.format(a=a, b=b)} {INSTRUCTION}"
    return question, f"{a} {op} {b} = {value} #### {value}", value


def rows(n: int, split: str, rng: random.Random, taken: set[str]) -> list[dict]:
    """``n`` rows of distinct questions not in ``taken`` (which they are added to)."""
    out: list[dict] = []
    while len(out) < n:
        question, worked, value = problem(rng)
        if question in taken:
            continue
        taken.add(question)
        out.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": question}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(value)},
                "extra_info": {"split": split, "index": len(out), "answer_text": worked},
                "response": worked,
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, default=2000, help="training rows")
    ap.add_argument("--val", type=int, default=128, help="validation rows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="output folder")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    taken: set[str] = set()
    val = rows(args.val, "test", rng, taken)  # drawn first, so the validation set does not
    train = rows(args.train, "train", rng, taken)  # depend on how many training rows are asked for
    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in (("train", train), ("val", val)):
        path = args.out / f"{name}.parquet"
        pq.write_table(pa.Table.from_pylist(data), path, compression="zstd")
        print(f"{path}: {len(data)} rows, {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
