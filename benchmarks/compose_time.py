"""How long composing a config takes (``rlinf_core.compose.load_config``), before and after
composition moved onto hydra-core's compose API.

Cases: every ``examples/*.yaml`` (none has a ``defaults:`` list today, so each takes the path
that skips Hydra), and an RLinf-style tree of 7 files (the shape of RLinf's
``frankasim_ppo_mlp.yaml``: four defaults entries with ``@package``, a nested defaults list,
``${...}`` interpolation), composed as written and with a group swap
(``training_backend=ddp``). ``warm`` is the median of ``--repeat`` composes in one process;
``cold`` is one compose in a fresh interpreter, imports included (the median of 3).

``--before REV`` measures the same cases with ``rlinf_core`` as it was at git revision ``REV``
(extracted with ``git archive`` into a temporary folder and put first on ``PYTHONPATH``), side
by side with the working tree's.

    uv run python benchmarks/compose_time.py [--before REV] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import finish, fmt, machine

ROOT = Path(__file__).resolve().parents[1]

RLINF_STYLE = {
    "frankasim_ppo_mlp.yaml": """\
defaults:
  - env/frankasim_pickcube_state@env.train
  - env/frankasim_pickcube_state@env.eval
  - model/mlp_policy@actor.model
  - training_backend/fsdp@actor.fsdp_config
  - _self_
algorithm:
  group_size: 8
env:
  train:
    total_num_envs: ${algorithm.group_size}
  eval:
    seed: 7
runner:
  experiment_name: frankasim_ppo
actor:
  model:
    hidden_dim: 64
  micro_batch_size: ${env.train.total_num_envs}
""",
    "env/frankasim_pickcube_state.yaml": "defaults:\n  - frankasim_base\nsimulator_type: frankasim\n"
    "total_num_envs: 4\nseed: 0\n",
    "env/frankasim_base.yaml": "max_episode_steps: 100\nobs_mode: state\n",
    "model/mlp_policy.yaml": "model_type: mlp\nhidden_dim: 256\n",
    "model/cnn_policy.yaml": "model_type: cnn\nchannels: [32, 64]\n",
    "training_backend/fsdp.yaml": "strategy: fsdp\n",
    "training_backend/ddp.yaml": "strategy: ddp\n",
}


def _cases(tree: Path) -> list[tuple[str, Path, list[str]]]:
    cases = [(f"examples/{p.name}", p, []) for p in sorted((ROOT / "examples").glob("*.yaml"))]
    primary = tree / "frankasim_ppo_mlp.yaml"
    cases.append(("rlinf-style tree (7 files)", primary, []))
    cases.append(("rlinf-style tree + training_backend=ddp", primary, ["training_backend=ddp"]))
    return cases


def _write_tree(tree: Path) -> None:
    for name, text in RLINF_STYLE.items():
        path = tree / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _worker(tree: Path, repeat: int) -> dict[str, float]:
    """Warm medians (ms) of every case, in this process."""
    from rlinf_core.compose import load_config

    out: dict[str, float] = {}
    for name, path, overrides in _cases(tree):
        load_config(path, overrides)
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            load_config(path, overrides)
            times.append(time.perf_counter() - t)
        out[name] = statistics.median(times) * 1000
    return out


def _cold(path: Path, overrides: list[str], env: dict[str, str]) -> float:
    """One compose in a fresh interpreter, imports included (ms; the median of 3)."""
    code = (
        "import time; t = time.perf_counter(); from rlinf_core.compose import load_config; "
        f"load_config({str(path)!r}, {overrides!r}); print((time.perf_counter() - t) * 1000)"
    )
    runs = [
        float(
            subprocess.run(
                [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
            ).stdout
        )
        for _ in range(3)
    ]
    return statistics.median(runs)


def _measure(tree: Path, repeat: int, src: Path | None) -> dict[str, Any]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", str(tree), "--repeat", str(repeat)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    warm = json.loads(proc.stdout.strip().splitlines()[-1])
    cold = {
        "examples/quickstart.yaml": _cold(ROOT / "examples" / "quickstart.yaml", [], env),
        "rlinf-style tree (7 files)": _cold(tree / "frankasim_ppo_mlp.yaml", [], env),
    }
    return {"warm": warm, "cold": cold}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--before", metavar="REV", help="also measure rlinf_core as it was at this git revision"
    )
    parser.add_argument("--repeat", type=int, default=20, help="composes per case for the warm median")
    parser.add_argument("--quick", action="store_true", help="5 composes per case")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    repeat = 5 if args.quick else args.repeat
    if args.worker is not None:
        print(json.dumps(_worker(args.worker, repeat)))
        return
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "title": "Config compose time: rlinf's own composer vs hydra-core's compose API",
        "machine": machine(("hydra-core", "omegaconf")),
        "repeat": repeat,
    }
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        _write_tree(tree)
        columns: dict[str, dict[str, Any]] = {}
        if args.before:
            src = Path(tmp) / "before"
            src.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", args.before, "packages/rlinf-core/src/rlinf_core"],
                check=True,
                capture_output=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
            columns[f"before ({args.before})"] = _measure(tree, repeat, src / "packages/rlinf-core/src")
        columns["after"] = _measure(tree, repeat, None)
        names = [name for name, _, _ in _cases(tree)]
    rows = []
    for name in names:
        row: dict[str, Any] = {"case": name}
        for label, figures in columns.items():
            row[f"{label} warm ms"] = round(figures["warm"][name], 2)
            if name in figures["cold"]:
                row[f"{label} cold ms"] = round(figures["cold"][name], 1)
        rows.append(row)
    report["figures"] = rows
    report["source"] = "benchmarks/compose_time.py"
    report["conditions"] = (
        f"load average {report['machine']['load_at_start'][0]:.1f} at the start on "
        f"{os.cpu_count()} CPUs: the figures are as noisy as that load"
    )
    report["notes"] = [
        "warm: median of the composes in one process; cold: one compose in a fresh interpreter "
        "with its imports (median of 3). No example has a defaults list: they skip Hydra.",
    ]
    header = list(rows[0].keys() | set().union(*(r.keys() for r in rows)))
    header = ["case", *[h for h in sorted(header) if h != "case"]]
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row.get(h, "-")) if h == "case" else fmt(row.get(h), ".2f") for h in header))
    finish(report, t0, args.json)


if __name__ == "__main__":
    main()
