"""The driver's records: metrics rows (``metrics.csv``, ``metrics.jsonl``, the progress callback
and through it the ``runner.loggers`` sinks), the wall clock across resumes, the recent episodes'
statistics of embodied runs, the best return, and the summary's base. One recorder for every
family: an embodied run's rows carry the episode columns (:data:`BASE_COLUMNS`), a
language-model run's rows what its flow measures per iteration.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlinf_algos.rundir import MetricsLog
from rlinf_core.io import atomic_write_text

__all__ = ["BASE_COLUMNS", "RunRecorder", "best_of"]

BASE_COLUMNS = ("step", "wall_s", "episode_return_mean", "episode_length_mean", "episodes", "env_steps_per_s")
"""The columns every embodied run's ``metrics.csv`` starts with."""


def best_of(best: float, final: float | None) -> float | None:
    """``best_return_mean``: the best of the logged rows and the final return (``None`` if
    neither is known)."""
    vals = [v for v in (best, final) if v is not None and not math.isnan(v) and v != -math.inf]
    return max(vals) if vals else None


class RunRecorder:
    """The records every run keeps (see the module docstring).

    Args:
        run_dir: the run directory.
        log_interval: progress units (env steps, iterations) between metrics rows.
        columns: the header of ``metrics.csv`` (``None``: no CSV, ``runner.loggers`` without it).
        episodes: where finished episodes are counted (``episodes`` and the ``recent_returns``,
            ``recent_lengths``, ``recent_successes`` deques: a
            :class:`~rlinf_algos.envs.VectorEnvStepper` or :class:`~rlinf_algos.stats.EpisodeStats`);
            ``None``: rows without episode columns (a language-model run).
        progress: called with every row.
        resume: append to the ``metrics.csv`` there is.
        jsonl: every row also to ``metrics.jsonl``, as written (a language-model run's).
    """

    def __init__(
        self,
        run_dir: Path,
        log_interval: int,
        columns: Iterable[str] | None,
        episodes: Any,
        progress: Callable[[dict[str, Any]], None] | None,
        resume: bool,
        jsonl: bool = False,
    ) -> None:
        self.run_dir, self.log_interval, self.episodes, self.progress = (
            run_dir,
            log_interval,
            episodes,
            progress,
        )
        run_dir.mkdir(parents=True, exist_ok=True)
        self.log = (
            MetricsLog(run_dir / "metrics.csv", columns, append=resume) if columns is not None else None
        )
        self.t0 = time.perf_counter()
        self.wall_offset = 0.0
        self.best = -math.inf
        self.last_log_step = 0
        self.last_log_time = self.t0
        self.last_row: dict[str, Any] = {}
        self.jsonl = run_dir / "metrics.jsonl" if jsonl else None
        if self.jsonl is not None and not resume:
            atomic_write_text(self.jsonl, "")

    def start_clock(self, step: int) -> None:
        """Training starts (or resumes) at ``step``: rows and throughput count from here."""
        self.t0 = self.last_log_time = time.perf_counter()
        self.last_log_step = step

    @property
    def wall_s(self) -> float:
        return self.wall_offset + time.perf_counter() - self.t0

    def return_mean(self) -> float:
        r = self.episodes.recent_returns
        return float(sum(r) / len(r)) if r else float("nan")

    def row(self, step: int, metrics: Mapping[str, Any], force: bool = False) -> dict[str, Any] | None:
        """Write a metrics row at ``step`` env steps if ``log_interval`` steps passed since the
        last one (or ``force``); returns it."""
        if step <= self.last_log_step or (not force and step - self.last_log_step < self.log_interval):
            return None
        now = time.perf_counter()
        row: dict[str, Any] = {"step": step, "wall_s": round(self.wall_s, 3)}
        if self.episodes is not None:
            row.update(self._episode_columns(step, now))
        for k, v in metrics.items():
            if k not in row and isinstance(v, int | float) and not isinstance(v, bool):
                row[k] = v
        if self.log is not None:
            self.log.write(row)
        if self.jsonl is not None:
            with self.jsonl.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
        self.last_row = row
        self.last_log_step, self.last_log_time = step, now
        if self.progress is not None:
            self.progress(row)
        return row

    def _episode_columns(self, step: int, now: float) -> dict[str, Any]:
        ret = self.return_mean()
        if not math.isnan(ret):
            self.best = max(self.best, ret)
        ep = self.episodes
        lengths = ep.recent_lengths
        cols: dict[str, Any] = {
            "episode_return_mean": ret,
            "episode_length_mean": float(sum(lengths) / len(lengths)) if lengths else float("nan"),
            "episodes": ep.episodes,
            "env_steps_per_s": (step - self.last_log_step) / max(now - self.last_log_time, 1e-9),
        }
        if ep.recent_successes:  # envs that report info["is_success"]
            cols["success_rate"] = float(sum(ep.recent_successes) / len(ep.recent_successes))
        return cols

    def _drop_jsonl_after(self, step: int) -> None:
        if self.jsonl is None or not self.jsonl.is_file():
            return
        kept = []
        for line in self.jsonl.read_text(encoding="utf-8").splitlines():
            try:
                if float(json.loads(line)["step"]) <= step:
                    kept.append(line)
            except (ValueError, KeyError, TypeError):
                continue
        atomic_write_text(self.jsonl, "".join(x + "\n" for x in kept))

    def restore_rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Write ``metrics.csv`` and ``metrics.jsonl`` anew from ``rows`` (a checkpoint of an
        earlier version that kept its rows), so the resumed run appends to them."""
        if self.log is not None:
            self.log.close()
            self.log.path.unlink(missing_ok=True)
            self.log.append = False
            for row in rows:
                self.log.write({"step": row.get("iteration"), **row})
            self.log.close()
            self.log.append = True
        if self.jsonl is not None:
            atomic_write_text(
                self.jsonl, "".join(json.dumps({"step": r.get("iteration"), **r}) + "\n" for r in rows)
            )

    def state(self) -> dict[str, Any]:
        """The recorder's part of a checkpoint's ``run`` record."""
        if self.episodes is None:
            return {"wall_s": self.wall_s, "best": self.best}
        ep = self.episodes
        return {
            "episodes": ep.episodes,
            "recent_returns": list(ep.recent_returns),
            "recent_lengths": list(ep.recent_lengths),
            "recent_successes": list(ep.recent_successes),
            "wall_s": self.wall_s,
            "best": self.best,
        }

    def load(self, s: Mapping[str, Any], step: int) -> None:
        """Restore a checkpoint's ``run`` record taken at env step ``step`` (metrics rows a killed
        run wrote after it are dropped)."""
        if self.log is not None:
            self.log.drop_rows_after(step)
        self._drop_jsonl_after(step)
        self.wall_offset = float(s.get("wall_s", 0.0))
        self.best = float(s.get("best", -math.inf))
        if self.episodes is None:
            return
        ep = self.episodes
        ep.episodes = int(s["episodes"])
        ep.recent_returns.extend(s["recent_returns"])
        ep.recent_lengths.extend(s["recent_lengths"])
        ep.recent_successes.extend(s.get("recent_successes", ()))

    def rewind(self, s: Mapping[str, Any], step: int) -> int:
        """Go back, mid-run, to a checkpoint's ``run`` record taken at env step ``step`` (the
        learner was restarted from it): the metrics rows written after it are dropped from
        ``metrics.csv`` (the steps after it run again and write their rows anew), the episode
        statistics and the best return are the checkpoint's; the wall clock keeps running.
        Returns how many rows were dropped."""
        dropped = 0
        if self.log is not None:
            self.log.close()
            dropped = self.log.drop_rows_after(step)
            self.log.append = self.log.path.is_file() and self.log.path.stat().st_size > 0
        self._drop_jsonl_after(step)
        self.best = float(s.get("best", -math.inf))
        self.last_log_step, self.last_log_time = step, time.perf_counter()
        if self.episodes is None:
            return dropped
        ep = self.episodes
        for window in (ep.recent_returns, ep.recent_lengths, ep.recent_successes):
            window.clear()
        ep.episodes = int(s["episodes"])
        ep.recent_returns.extend(s["recent_returns"])
        ep.recent_lengths.extend(s["recent_lengths"])
        ep.recent_successes.extend(s.get("recent_successes", ()))
        return dropped

    def summary(self, algorithm: str, env_id: str, steps: int, interrupted: bool) -> dict[str, Any]:
        """The summary fields every embodied runtime writes."""
        wall = self.wall_s
        final = self.return_mean()
        ep = self.episodes
        return {
            "algorithm": algorithm,
            "env_id": env_id,
            "total_env_steps": steps,
            "wall_s": round(wall, 3),
            "env_steps_per_s": steps / wall if wall > 0 else 0.0,
            "final_return_mean": None if math.isnan(final) else final,
            # the best logged row's, or the final one if better (a run stopped between rows)
            "best_return_mean": best_of(self.best, final),
            # over the last 100 training episodes; None if the env has no info["is_success"]
            "success_rate": float(sum(ep.recent_successes) / len(ep.recent_successes))
            if ep.recent_successes
            else None,
            "episodes": ep.episodes,
            "interrupted": interrupted,
        }

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
