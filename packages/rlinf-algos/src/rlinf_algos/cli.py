"""``rlinf train``, ``rlinf eval`` and ``rlinf plot`` (registered by the rlinf-algos plugin).

Light at import: click and rlinf_core only; each command imports what it needs when it runs.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from rlinf_core.cli import get_host

__all__ = ["register"]


class _ProgressBar:
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
            return  # an algorithm without env steps (grpo_lm) prints its own progress lines
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

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def register(cli: click.Group) -> None:
    """Add ``train``, ``eval`` and ``plot`` to the ``rlinf`` command group."""
    cli.add_command(train_cmd)
    cli.add_command(eval_cmd)
    cli.add_command(plot_cmd)


class _StopOnTerm:
    """SIGTERM (what a batch scheduler, ``kill`` or a preempted cloud node sends) stops training
    the way Ctrl-C does: the iteration in flight ends, a checkpoint, the policy and the summary
    are written, and the command exits 143. A second SIGTERM kills at once. Only the main thread
    can install handlers; elsewhere (a library caller's thread) nothing is changed."""

    def __init__(self) -> None:
        self.received = False
        self._previous: Any = None
        self._main = threading.current_thread() is threading.main_thread()
        self.arm()

    def arm(self) -> None:
        """Install the handler (again: ``ray.init`` installs its own, which exits at once)."""
        if self._main and signal.getsignal(signal.SIGTERM) != self._handle:
            previous = signal.signal(signal.SIGTERM, self._handle)
            if self._previous is None:
                self._previous = previous

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received:  # asked twice: stop waiting for the checkpoint
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self.received = True
        raise KeyboardInterrupt

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None


@click.command("train")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("overrides", nargs=-1)
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the run writes (default: runs/<config name>-<time>).",
)
@click.option(
    "--resume",
    "resume_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Continue the run in this directory from its newest checkpoint.",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.pass_context
def train_cmd(
    ctx: click.Context,
    config: Path,
    overrides: tuple[str, ...],
    run_dir: Path | None,
    resume_dir: Path | None,
    quiet: bool,
) -> None:
    """Train with the run configuration CONFIG.yaml.

    OVERRIDES are dotted `key=value` settings applied on top (values are YAML):
    `rlinf train examples/quickstart.yaml runner.total_steps=20000 env.num_envs=4`.

    The whole configuration is checked before anything starts. Runs on an embedded Ray, or on the
    cluster at RAY_ADDRESS. Ctrl-C or SIGTERM writes a checkpoint first; --resume RUN_DIR continues it.
    """
    from rlinf_algos.runner import TrainingInterrupted, run_training
    from rlinf_core.config import load_yaml
    from rlinf_core.errors import RlinfError

    if resume_dir is not None and run_dir is not None and resume_dir != run_dir:
        raise click.UsageError("give --resume RUN_DIR or --run-dir DIR, not both")
    data = load_yaml(config)
    bar = None if quiet else _ProgressBar()
    target = resume_dir or run_dir
    stop_signal = _StopOnTerm()
    try:
        summary = run_training(
            data,
            run_dir=target,
            overrides=overrides,
            resume=resume_dir is not None,
            progress=bar,
            host=get_host(ctx),
            config_path=config,
            on_started=stop_signal.arm,
        )
    except TrainingInterrupted as stop:
        if bar is not None:
            bar.close()
        what = "terminated (SIGTERM)" if stop_signal.received else "interrupted"
        if stop.checkpoint is not None:
            click.echo(
                f"{what}: wrote {stop.checkpoint}, the policy and summary.json; continue with "
                f"`rlinf train {config} --resume {stop.run_dir}`",
                err=True,
            )
        else:
            click.echo(f"{what} before training started (run directory {stop.run_dir})", err=True)
        sys.exit(143 if stop_signal.received else 130)
    except RlinfError:
        if bar is not None:
            bar.close()
        raise
    finally:
        stop_signal.restore()
    if bar is not None:
        bar.close()
    if "accuracy_before" in summary:  # grpo_lm: a verifier's exact-match accuracy, not env steps
        click.echo(
            f"done: held-out accuracy {summary['accuracy_before']:.3f} -> {summary['accuracy_after']:.3f} "
            f"({summary['accuracy_gain_pp']:+.1f} pp) in {summary['total_s']:.1f} s, "
            f"{summary['iterations']} GRPO iterations"
        )
        click.echo(f"run directory: {target or _run_dir_of(summary)}")
        return
    ret = summary.get("final_return_mean")
    success = summary.get("success_rate")
    click.echo(
        f"done: {summary['total_env_steps']} env steps in {summary['wall_s']:.1f} s "
        f"({summary['env_steps_per_s']:,.0f} steps/s); final return "
        f"{'-' if ret is None else f'{ret:.1f}'}, best {summary.get('best_return_mean')}"
        + ("" if success is None else f", success rate {success:.2f} (last 100 training episodes)")
    )
    click.echo(f"run directory: {target or _run_dir_of(summary)}")


def _run_dir_of(summary: dict[str, Any]) -> str:
    return str(summary.get("run_dir", "(see runs/)"))


@click.command("eval")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--episodes", "-n", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--seed", type=int, default=10_000, show_default=True, help="Seed of the evaluation episodes.")
@click.option("--stochastic", is_flag=True, help="Sample actions instead of taking the mean.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def eval_cmd(run_dir: Path, episodes: int, seed: int, stochastic: bool, as_json: bool) -> None:
    """Run the final policy of RUN_DIR for N episodes; print the mean and std of the return (and
    the success rate, for envs that report info["is_success"])."""
    from rlinf_algos.local_runner import evaluate_policy

    res = evaluate_policy(run_dir / "policy.pt", episodes=episodes, seed=seed, deterministic=not stochastic)
    if as_json:
        click.echo(json.dumps(res))
        return
    line = f"{episodes} episodes: return {res['mean']:.2f} +- {res['std']:.2f}"
    if res.get("success_rate") is not None:
        line += f", success rate {res['success_rate']:.2f}"
    click.echo(line)


@click.command("plot")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), help="Folder of the PNGs (RUN_DIR/plots)."
)
def plot_cmd(run_dir: Path, out: Path | None) -> None:
    """Write learning-curve PNGs of RUN_DIR (from its metrics.csv)."""
    from rlinf_algos.plot import plot_run

    for path in plot_run(run_dir, out):
        click.echo(str(path))
