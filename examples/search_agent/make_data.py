"""Write the search example's data into examples/search_agent/data/ (or --out DIR): a corpus about
a made-up world, two-hop questions (train / held-out), and a teacher's tool-calling traces.

    python examples/search_agent/make_data.py [--seed 0] [--slip 0.5] [--out DIR] [--wideseek]

See :mod:`rlinf_algos.lm.agentic.multihop` for what the world, the questions and the traces are.
The files are the same on every machine for one seed (a few seconds to write):

- ``corpus.jsonl``: the documents the ``search`` tool indexes (grpo.yaml and sft.yaml's ``tools``);
- ``train.jsonl`` / ``val.jsonl``: the questions, ``prompt`` as one user message, ``answer``,
  ``data_source`` (rlinf/multihop_birth_city or rlinf/multihop_country): GRPO's prompts and
  held-out set;
- ``sft_train.jsonl``: a careless teacher's traces (``messages`` in TRL's format; it answers after
  one search with probability ``--slip``), the warm start's data; ``sft_val.jsonl``: a careful
  teacher's traces of the held-out questions.

With ``--wideseek`` it also writes ``wideseek_sft_train.jsonl`` / ``wideseek_sft_val.jsonl``: a
lead's traces (it asks a subagent each hop) and its subagents' (one search each), for
wideseek_sft.yaml and wideseek.yaml (:mod:`rlinf_algos.lm.agentic.wideseek`).

The traces hold the real results of the built-in search tool with ``--top-k`` passages: keep it
equal to the ``top_k`` of the YAMLs' ``tools`` section.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlinf_algos.lm.agentic.multihop import write_dataset
from rlinf_algos.lm.agentic.wideseek import write_wideseek


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "data")
    parser.add_argument("--seed", type=int, default=0, help="the world's seed (not the training seed)")
    parser.add_argument(
        "--slip", type=float, default=0.5, help="how often the teacher answers after one search"
    )
    parser.add_argument("--top-k", type=int, default=3, help="passages per search (the tool's top_k)")
    parser.add_argument("--companies", type=int, default=4000, help="training companies (two questions each)")
    parser.add_argument("--cities", type=int, default=1200, help="cities of the training companies")
    parser.add_argument(
        "--words", type=int, default=1200, help="name words every name is made of (two words each)"
    )
    parser.add_argument(
        "--wideseek",
        action="store_true",
        help="also write the lead-and-subagents traces (wideseek_sft_*.jsonl)",
    )
    args = parser.parse_args()
    if args.companies < 1 or args.cities < 2:
        parser.error(f"--companies must be >= 1 and --cities >= 2, got {args.companies} and {args.cities}")
    world = {"seed": args.seed, "slip": args.slip, "top_k": args.top_k}
    sizes = {"companies": args.companies, "cities": args.cities, "words": args.words}
    try:
        print(json.dumps(write_dataset(args.out, **world, **sizes)))
    except ValueError as e:  # a world too large for its name words
        parser.error(f"{e}: raise --words or lower --companies / --cities")
    if args.wideseek:  # the same world, played by a lead and its subagents (wideseek_sft.yaml)
        print(json.dumps(write_wideseek(args.out, **world, **sizes)))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
