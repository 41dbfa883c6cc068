"""``rlinf plot RUN_DIR``: learning curves of a run as PNG files (matplotlib, Agg backend).

Reads ``RUN_DIR/metrics.csv`` and writes ``RUN_DIR/plots/return.png`` (episode return against
env steps, with the episode length on a second axis when present; for a language-model run
``reward.png``: the mean reward, the training samples' accuracy and the held-out accuracy
against GRPO iterations) and
``RUN_DIR/plots/metrics.png`` (one small panel per other numeric column). A damaged or foreign
``metrics.csv`` (not UTF-8, no ``step`` column) is one error line.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from rlinf_core.errors import RlinfError
from rlinf_core.io import read_user_text

__all__ = ["plot_run", "read_metrics"]

_SKIP = {"step", "iteration", "wall_s", "episode_return_mean", "episode_length_mean"}

_MAX_METRICS_BYTES = 2**30


def _columns(row: dict[Any, Any]) -> str:
    text = ", ".join(str(k) for k in row if isinstance(k, str))
    return text if len(text) <= 120 else text[:117] + "..."


def read_metrics(run_dir: str | Path) -> dict[str, list[float]]:
    """Columns of ``metrics.csv`` as float lists (``nan`` for empty cells)."""
    path = Path(run_dir) / "metrics.csv"
    if not path.exists():
        raise RlinfError(f"no metrics.csv in {run_dir}: is it a run directory written by `rlinf train`?")
    text = read_user_text(path, what="metrics file", max_bytes=_MAX_METRICS_BYTES)
    try:
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as err:
        raise RlinfError(
            f"{path} is not a CSV file ({err}); it is damaged, or not written by `rlinf train`"
        ) from None
    if not rows:
        raise RlinfError(f"{path} has no rows yet: the run logs one every runner.log_interval env steps")
    if "step" not in rows[0]:
        raise RlinfError(
            f"{path} has no `step` column (columns: {_columns(rows[0])}); it is damaged, or not a metrics "
            "file written by `rlinf train`"
        )
    cols: dict[str, list[float]] = {k: [] for k in rows[0] if isinstance(k, str)}
    for row in rows:
        for k in cols:
            try:
                cols[k].append(float(row.get(k) or "nan"))
            except ValueError:
                cols[k].append(math.nan)
    return cols


def plot_run(run_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write the PNGs; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    cols = read_metrics(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir / "plots"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RlinfError(
            f"cannot create the plot folder {out}: {err.strerror or err}; give another --out"
        ) from None
    steps = cols["step"]
    written: list[Path] = []
    if "episode_return_mean" in cols:
        written.append(_return_plot(plt, run_dir, cols, out))
    elif "reward_mean" in cols:  # a language-model run: one row per iteration
        written.append(_reward_plot(plt, run_dir, cols, out))
    others = [k for k, v in cols.items() if k not in _SKIP and any(not math.isnan(x) for x in v)]
    if others:
        ncols = 3
        nrows = math.ceil(len(others) / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(4 * ncols, 2.6 * nrows), dpi=100, squeeze=False)
        for ax, key in zip(axes.flat, others, strict=False):
            ax.plot(steps, cols[key])
            ax.set_title(key, fontsize=9)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(others) :]:
            ax.axis("off")
        fig.tight_layout()
        path = out / "metrics.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    for result in sorted((run_dir / "eval").glob("*.json")) if (run_dir / "eval").is_dir() else []:
        written.extend(plot_suite(result, out, plt))
    return written


def plot_suite(result_file: Path, out: Path, plt: Any) -> list[Path]:
    """A suite evaluation's JSON (``rlinf eval --suite``, in ``RUN_DIR/eval/``) as a bar chart:
    ``success_at_end`` and ``success_once`` per task with their 95 % Wilson intervals; nothing for
    another JSON."""
    import json

    try:
        res = json.loads(Path(result_file).read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(res, dict) or not isinstance(res.get("tasks"), list) or not res["tasks"]:
        return []
    tasks = res["tasks"]
    names = [t["task"] for t in tasks]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * len(names) + 2), 3.4), dpi=100)
    width = 0.38
    for j, key in enumerate(("success_at_end", "success_once")):
        rates = [t[key]["rate"] if t.get(key) else math.nan for t in tasks]
        low = [r - t[key]["ci95"][0] if t.get(key) else 0.0 for r, t in zip(rates, tasks, strict=True)]
        high = [t[key]["ci95"][1] - r if t.get(key) else 0.0 for r, t in zip(rates, tasks, strict=True)]
        xs = [i + (j - 0.5) * width for i in range(len(names))]
        ax.bar(xs, rates, width, yerr=[low, high], capsize=2, label=key.replace("_", " "))
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("success (95% Wilson)")
    episodes = res.get("episodes_per_task")
    ax.set_title(
        f"{res.get('suite')}: {res.get('policy')}, {episodes} episodes per task, seed {res.get('seed')}",
        fontsize=9,
    )
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = out / f"{Path(result_file).stem}.png"
    fig.savefig(path)
    plt.close(fig)
    return [path]


def _return_plot(plt: Any, run_dir: Path, cols: dict[str, list[float]], out: Path) -> Path:
    steps = cols["step"]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot(steps, cols["episode_return_mean"], color="tab:blue", label="episode return (mean of last 100)")
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return")
    ax.grid(alpha=0.3)
    if "episode_length_mean" in cols:
        ax2 = ax.twinx()
        ax2.plot(steps, cols["episode_length_mean"], color="tab:gray", alpha=0.5, label="episode length")
        ax2.set_ylabel("episode length")
    ax.set_title(f"{run_dir.name}: learning curve")
    ax.legend(loc="upper left")
    fig.tight_layout()
    path = out / "return.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def _reward_plot(plt: Any, run_dir: Path, cols: dict[str, list[float]], out: Path) -> Path:
    steps = cols["step"]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot(steps, cols["reward_mean"], color="tab:blue", label="mean reward of the iteration's samples")
    if "train_accuracy" in cols:
        ax.plot(steps, cols["train_accuracy"], color="tab:gray", alpha=0.6, label="samples with reward 1")
    held = [
        (s, v) for s, v in zip(steps, cols.get("heldout_accuracy", []), strict=False) if not math.isnan(v)
    ]
    if held:
        ax.plot(
            [s for s, _ in held], [v for _, v in held], "o-", color="tab:green", label="held-out accuracy"
        )
    ax.set_xlabel("iteration")
    ax.set_ylabel("reward / accuracy")
    ax.grid(alpha=0.3)
    ax.set_title(f"{run_dir.name}: learning curve")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path = out / "reward.png"
    fig.savefig(path)
    plt.close(fig)
    return path
