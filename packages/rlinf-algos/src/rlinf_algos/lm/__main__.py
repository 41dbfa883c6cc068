"""``python -m rlinf_algos.lm RUN.yaml [--run-dir DIR] [key.path=value ...]``: run a language-model
config in this process, whatever its ``runner.scheduler`` (``rlinf train`` with
``runner.scheduler=local`` does the same, with a run directory guarded against overwriting)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rlinf_core.errors import RlinfError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rlinf_algos.lm", description=__doc__)
    ap.add_argument("config", help="run YAML (examples/grpo_arith.yaml, examples/grpo_multiagent.yaml)")
    ap.add_argument("--run-dir", default=None, help="output directory (default runs/<yaml stem>-<time>)")
    ap.add_argument("overrides", nargs="*", help="key.path=value overrides, e.g. algorithm.iterations=10")
    args = ap.parse_intermixed_args(argv)
    try:
        from rlinf_algos.config.prepare import prepare_run
        from rlinf_algos.lm.config import LMRunConfig

        run = prepare_run(args.config, args.overrides).sections  # composed and validated as rlinf train does
        if not isinstance(run, LMRunConfig):
            raise RlinfError(
                f"{args.config} is not a language-model run (algorithm grpo_lm or ppo_lm); use rlinf train"
            )
        run_dir = Path(args.run_dir or f"runs/{Path(args.config).stem}-{time.strftime('%Y%m%d-%H%M%S')}")
        from rlinf_algos.lm.flow import train_lm

        train_lm(run, run_dir)
        print(f"run directory: {run_dir} (summary.json, metrics.csv, policy/)")
    except RlinfError as err:
        print(f"error: {err}", file=sys.stderr)
        return getattr(err, "exit_code", 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
