"""``rlinf demos``: record a family's scripted expert into a demonstration data set (LeRobot's
layout) for behaviour cloning (``model.bc``)."""

from __future__ import annotations

import json
from pathlib import Path

import click

__all__ = ["demos_group"]


@click.group("demos")
def demos_group() -> None:
    """Demonstration data sets: record a scripted expert, show what a data set holds."""


@demos_group.command("record")
@click.argument("suite")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="A new folder.")
@click.option("--episodes-per-task", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Episode e resets with seed SEED + e.")
@click.option("--num-envs", type=click.IntRange(min=1), default=10, show_default=True)
@click.option(
    "--obs-mode", type=click.Choice(["state", "pixels", "pixels+state"]), default="state", show_default=True
)
@click.option("--image-size", type=(int, int), default=(64, 64), show_default=True, help="HEIGHT WIDTH")
@click.option(
    "--noise",
    type=click.FloatRange(min=0.0),
    default=0.0,
    show_default=True,
    help="Gaussian action noise std.",
)
@click.option(
    "--keep",
    type=click.Choice(["end", "once", "all"]),
    default="end",
    show_default=True,
    help="Which episodes to keep: those that succeed at their last step, at some step, or all.",
)
@click.option("--max-episode-steps", type=click.IntRange(min=1), default=None)
@click.option("--env-python", default=None, help="The simulator's interpreter (env.python).")
def record_cmd(
    suite: str,
    out: Path,
    episodes_per_task: int,
    seed: int,
    num_envs: int,
    obs_mode: str,
    image_size: tuple[int, int],
    noise: float,
    keep: str,
    max_episode_steps: int | None,
    env_python: str | None,
) -> None:
    """Play SUITE's scripted expert (FAMILY:SUITE, e.g. metaworld:MT10 or metaworld:reach-v3)
    for --episodes-per-task episodes of every task (episode e from the task's fixed initial
    state e) and write them to --out: parquet in LeRobot's layout (meta/, data/)."""
    from rlinf_algos.demos import record_demos

    info = record_demos(
        suite,
        out,
        episodes_per_task=episodes_per_task,
        seed=seed,
        num_envs=num_envs,
        obs_mode=obs_mode,
        image_size=image_size,
        noise=noise,
        keep=keep,
        max_episode_steps=max_episode_steps,
        python=env_python,
        say=click.echo,
    )
    r = info["rlinf"]
    click.echo(
        f"{out}: {info['total_episodes']} episodes ({r['episodes_tried']} played), {info['total_frames']} steps "
        f"of {info['total_tasks']} tasks in {r['seconds']:.0f} s"
    )


@demos_group.command("info")
@click.argument("path", type=click.Path(file_okay=False, path_type=Path))
def info_cmd(path: Path) -> None:
    """What the data set at PATH holds (meta/info.json)."""
    from rlinf_algos.demos import load_demos

    data = load_demos(path, where="PATH")
    click.echo(json.dumps({**data["info"], "loaded_steps": len(data["action"])}, indent=2))
