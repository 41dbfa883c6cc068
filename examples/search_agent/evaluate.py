"""Held-out success of a search-agent policy, played through the real multi-turn tool loop.

    python examples/search_agent/evaluate.py POLICY_DIR [--config examples/search_agent/grpo.yaml]
        [--seed 10000] [--json PATH] [KEY=VALUE ...]

POLICY_DIR is a model folder (``rlinf sft``'s RUN_DIR/policy, or a GRPO run's). The episodes are
grpo.yaml's (its data.val_files, tools, algorithm.max_turns and token budget, its reward), each
played greedily in this process: the policy's turns are parsed for tool calls, the built-in
search tool answers them, until an answer. Prints the success (exact match) overall and per
question kind, with the tool use (turns, searches, answer rate).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlinf_algos.lm.config import load_lm_sections
from rlinf_algos.lm.evaluate import evaluate_policy
from rlinf_core.compose import load_config

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("policy", type=Path)
    parser.add_argument("overrides", nargs="*", help="dotted KEY=VALUE settings of the config")
    parser.add_argument("--config", type=Path, default=HERE / "grpo.yaml")
    parser.add_argument("--seed", type=int, default=10_000)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    data = load_config(args.config, [*args.overrides, f"model.path={args.policy}"])
    res = evaluate_policy(load_lm_sections(data), seed=args.seed)
    res["policy"] = str(args.policy)

    def line(r: dict) -> str:
        t = r.get("tools", {})
        return (
            f"success {r['accuracy']:.3f} on {r['problems']}  turns {t.get('turns', 0):.2f}  "
            f"searches {t.get('tool_calls/search', 0):.2f}  answer rate {t.get('answer_rate', 0):.2f}"
        )

    print(f"{args.policy}: {line(res)}")
    for src, r in res["per_data_source"].items():
        print(f"  {src}: {line(r)}")
    if args.json is not None:
        args.json.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
