"""The progress bar of ``rlinf train`` and ``rlinf sft``: redrawn in place on a terminal, quiet
(or one line per metrics row, for embodied runs) in a log file or CI.

Light at import: rich is imported when the first row arrives.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

__all__ = ["ProgressBar"]


class ProgressBar:
    """A rich progress bar: env steps, steps/s, the recent return and the ETA. On a terminal it
    redraws in place; otherwise (a log file, CI) every metrics row is printed as one line."""

    def __init__(self, stream: Any = None) -> None:
        from rich.console import Console

        self.console = Console(file=stream or sys.stderr)
        self.live = self.console.is_terminal
        self.progress: Any = None
        self.task: Any = None
        self.t0 = time.perf_counter()

    def __call__(self, row: dict[str, Any]) -> None:
        if "env_steps_per_s" not in row and "episode_return_mean" not in row:
            self._iterations(row)  # a language-model run (grpo_lm, ppo_lm) or `rlinf sft`
            return
        total = row.get("total_steps")
        step = int(row["step"])
        ret = row.get("episode_return_mean", math.nan)
        sps = row.get("env_steps_per_s", math.nan)
        ret_text = "-" if ret is None or (isinstance(ret, float) and math.isnan(ret)) else f"{ret:.1f}"
        if not self.live:
            eta = ""
            if total and sps and sps > 0 and not math.isnan(sps):
                eta = f"  eta {max(total - step, 0) / sps:.0f}s"
            self.console.print(
                f"step {step}/{total or '?'}  {sps:,.0f} steps/s  return {ret_text}  wall {row.get('wall_s', 0):.0f}s{eta}",
                highlight=False,
            )
            return
        if self.progress is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[sps]} steps/s"),
                TextColumn("return {task.fields[ret]}"),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=self.console,
            )
            self.progress.start()
            self.task = self.progress.add_task("train", total=total, sps="-", ret="-")
        self.progress.update(self.task, completed=step, sps=f"{sps:,.0f}", ret=ret_text)

    def _iterations(self, row: dict[str, Any]) -> None:
        """A run counted in iterations (``step``: the iteration, or the ``rlinf sft`` step, of
        ``total_steps``): a bar with the reward and train accuracy (or the loss) on a terminal;
        nothing otherwise, as those runs print a line every ``runner.log_interval`` themselves."""
        if not self.live:
            return
        if "train_accuracy" in row:
            label = "train"
            info = f"reward {row.get('reward_mean', math.nan):.3f}  acc {row['train_accuracy']:.3f}"
        else:
            label = "sft"
            info = f"loss {row.get('loss', math.nan):.4f}"
        if self.progress is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn(f"[bold]{label}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=self.console,
            )
            self.progress.start()
            self.task = self.progress.add_task(label, total=row.get("total_steps"), info="-")
        self.progress.update(self.task, completed=int(row["step"]), info=info)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
