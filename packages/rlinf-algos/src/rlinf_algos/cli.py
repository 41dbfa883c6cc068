"""``rlinf train``, ``rlinf eval`` and ``rlinf plot`` (registered by the rlinf-algos plugin).

Light at import: click and rlinf_core only; each command imports what it needs when it runs.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from rlinf_algos.cli_options import StopOnTerm, overwrite_option, run_dir_option, trust_option
from rlinf_algos.progress_bar import ProgressBar
from rlinf_core.cli import get_host

__all__ = ["register"]


def register(cli: click.Group) -> None:
    """Add ``train``, ``eval``, ``plot``, ``sft``, ``bench`` and ``convert`` to the ``rlinf`` command group."""
    from rlinf_algos.bench import bench
    from rlinf_algos.convert_cli import convert_cmd
    from rlinf_algos.demos_cli import demos_group
    from rlinf_algos.families.cli import env_group
    from rlinf_algos.sft_cli import sft_cmd

    cli.add_command(train_cmd)
    cli.add_command(eval_cmd)
    cli.add_command(plot_cmd)
    cli.add_command(sft_cmd)
    cli.add_command(bench)
    cli.add_command(convert_cmd)
    cli.add_command(env_group)
    cli.add_command(demos_group)


@click.command("train")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("overrides", nargs=-1)
@run_dir_option
@click.option(
    "--resume",
    "resume_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Continue the run in this directory from its newest checkpoint.",
)
@overwrite_option
@trust_option
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Validate everything, print the resolved config and the placement plan, start nothing "
    "(exit 0, or 2 on a configuration problem).",
)
@click.option(
    "--inventory",
    "inventory_path",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="With --dry-run: accelerators per node for the plan (as `rlinf cluster plan --inventory`).",
)
@click.option(
    "--gpus-per-node",
    type=click.IntRange(min=0),
    help="With --dry-run: give every node this many GPUs (instead of --inventory).",
)
@click.option(
    "--gpu-memory",
    type=click.FloatRange(min=0, min_open=True),
    help="With --dry-run: GiB of memory per GPU, to check each role's estimated memory against "
    "(default: this machine's GPU, when it has one).",
)
@click.option(
    "--print-config",
    is_flag=True,
    help="Print the composed configuration (defaults lists merged, overrides applied, ${...} "
    "resolved but ${oc.env:...} kept) as YAML and exit; `rlinf train` takes that output as it is.",
)
@click.option(
    "--multirun",
    "-m",
    is_flag=True,
    help="A sweep: `key=a,b,c` (or `key=range(0,3)`) overrides give one run per combination, run "
    "one after another into RUN_DIR/<i>_<key=value>; then one table of the final metrics.",
)
@click.pass_context
def train_cmd(
    ctx: click.Context,
    config: Path,
    overrides: tuple[str, ...],
    run_dir: Path | None,
    resume_dir: Path | None,
    overwrite: bool,
    trust: bool,
    quiet: bool,
    dry_run: bool,
    inventory_path: Path | None,
    gpus_per_node: int | None,
    gpu_memory: float | None,
    print_config: bool,
    multirun: bool,
) -> None:
    """Train with the run configuration CONFIG.yaml.

    OVERRIDES are dotted `key=value` settings applied on top (values are YAML):
    `rlinf train examples/quickstart.yaml runner.total_steps=20000 env.num_envs=4`;
    `+key=value` adds a key, `++key=value` adds or replaces, `~key` deletes, `group=name` picks
    another file of a `defaults:` list. `--multirun runner.seed=0,1,2` sweeps.

    The whole configuration is checked before anything starts. Runs on an embedded Ray, or on the
    cluster at RAY_ADDRESS. Ctrl-C or SIGTERM writes a checkpoint first; --resume RUN_DIR continues it.
    """
    from rlinf_algos.training import TrainingInterrupted, run_training
    from rlinf_core.errors import RlinfError

    if multirun:
        if resume_dir is not None or print_config:
            raise click.UsageError(
                "--multirun starts new runs: it does not go with --resume or --print-config"
            )
        _multirun(
            ctx,
            config,
            overrides,
            run_dir,
            overwrite,
            quiet,
            dry_run,
            inventory_path,
            gpus_per_node,
            gpu_memory,
        )
        return
    if print_config:
        _print_config(config, overrides)
        return
    if resume_dir is not None and run_dir is not None and resume_dir != run_dir:
        raise click.UsageError("give --resume RUN_DIR or --run-dir DIR, not both")
    if overwrite and resume_dir is not None:
        raise click.UsageError("--overwrite starts a new run; --resume continues one: give one of them")
    if (inventory_path is not None or gpus_per_node is not None or gpu_memory is not None) and not dry_run:
        raise click.UsageError("--inventory, --gpus-per-node and --gpu-memory go with --dry-run")
    if inventory_path is not None and gpus_per_node is not None:
        raise click.UsageError("give --inventory or --gpus-per-node, not both")
    if resume_dir is not None:
        _check_resumed_code(config, overrides, resume_dir, trust)
    if dry_run:
        _print_dry_run(ctx, config, overrides, inventory_path, gpus_per_node, gpu_memory)
        return
    bar = None if quiet else ProgressBar()
    target = resume_dir or run_dir
    stop_signal = StopOnTerm()
    try:
        summary = run_training(
            config,
            run_dir=target,
            overrides=overrides,
            resume=resume_dir is not None,
            progress=bar,
            host=get_host(ctx),
            config_path=config,
            on_started=stop_signal.arm,
            overwrite=overwrite,
        )
    except TrainingInterrupted as stop:
        if bar is not None:
            bar.close()
        what = "terminated (SIGTERM)" if stop_signal.received else "interrupted"
        # the overrides too: without them the resumed run would take the file's settings
        again = shlex.join(["rlinf", "train", str(config), *overrides, "--resume", str(stop.run_dir)])
        if getattr(stop, "skipped", None):
            hint = f"; continue with `{again}`" if stop.checkpoint is not None else ""
            click.echo(f"{what}: {stop.skipped}{hint}", err=True)
            # a worker's thread is still blocked (in a user's env, say): end now, without the
            # interpreter's finalisation, which can take seconds beside such threads
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(143 if stop_signal.received else 130)
        elif stop.checkpoint is not None:
            click.echo(
                f"{what}: wrote {stop.checkpoint}, the policy and summary.json; continue with `{again}`",
                err=True,
            )
        else:
            click.echo(
                f"{what} before training started (run directory {stop.run_dir}); `{again}` starts it again "
                "there, keeping what its set-up did (a warm start continues from its checkpoint)",
                err=True,
            )
        sys.exit(143 if stop_signal.received else 130)
    except RlinfError:
        if bar is not None:
            bar.close()
        raise
    finally:
        stop_signal.restore()
    if bar is not None:
        bar.close()
    click.echo(summary["summary_text"])
    click.echo(f"run directory: {target or _run_dir_of(summary)}")


def _check_resumed_code(config: Path, overrides: tuple[str, ...], run_dir: Path, trust: bool) -> None:
    """``--resume RUN`` with RUN's own ``config.yaml`` (a shared run): refuse the code it names
    that no installed plugin provides and no override gives anew, unless ``--trust``
    (:mod:`rlinf_algos.code_refs`). A config file from elsewhere is the user's own."""
    from rlinf_algos.code_refs import check_references, config_references

    if trust or not config.resolve().is_relative_to(run_dir.resolve()):
        return
    from rlinf_algos.config.prepare import compose_run_config

    refs = config_references(compose_run_config(config, overrides), str(config))
    check_references(
        refs,
        f"resuming {run_dir}",
        overrides=overrides,
        anew=" or give what it names anew as overrides (key=value)",
    )


def _print_config(config: Path, overrides: tuple[str, ...]) -> None:
    """``rlinf train --print-config``: the composed, resolved configuration as YAML (the
    pipeline's first step, :func:`~rlinf_algos.config.prepare.compose_run_config`), with
    ``${oc.env:...}`` kept unresolved (:func:`~rlinf_algos.config.prepare.printable_config`)."""
    import yaml

    from rlinf_algos.config.prepare import printable_config

    click.echo(yaml.safe_dump(printable_config(config, overrides), sort_keys=False), nl=False)


def _multirun(
    ctx: click.Context,
    config: Path,
    overrides: tuple[str, ...],
    run_dir: Path | None,
    overwrite: bool,
    quiet: bool,
    dry_run: bool,
    inventory_path: Path | None,
    gpus_per_node: int | None,
    gpu_memory: float | None = None,
) -> None:
    """``rlinf train --multirun``: every combination prepared (composed, translated, validated and
    planned) before any runs, then run one after another; the table of final metrics; exit 1
    naming the runs that failed."""
    from rlinf_algos.config.prepare import prepare_run
    from rlinf_algos.rundir import default_run_dir
    from rlinf_algos.train_api import multirun_plan, multirun_table, run_multirun
    from rlinf_algos.training import run_training

    sweep_dir = run_dir or default_run_dir(config)
    host = get_host(ctx)
    if dry_run:
        for item in multirun_plan(overrides, sweep_dir):
            click.echo(f"# run {item.index}: {' '.join(item.swept) or '(no swept keys)'} -> {item.run_dir}")
            _print_dry_run(ctx, config, tuple(item.overrides), inventory_path, gpus_per_node, gpu_memory)
        return

    def run(item: Any, prepared: Any) -> dict[str, Any]:
        bar = None if quiet else ProgressBar()
        try:
            return run_training(prepared, run_dir=item.run_dir, progress=bar, overwrite=overwrite)
        finally:
            if bar is not None:
                bar.close()

    results, failures = run_multirun(
        overrides,
        sweep_dir,
        run,
        prepare=lambda item: prepare_run(config, item.overrides, host=host, plan=True),
        echo=lambda line: click.echo(line, err=True),
    )
    click.echo(multirun_table(results), nl=False)
    click.echo(f"sweep directory: {sweep_dir} (multirun.json lists the runs)")
    if failures:
        for item, error in failures:
            click.echo(f"run {item.index} ({' '.join(item.swept)}, {item.run_dir}) failed: {error}", err=True)
        sys.exit(1)


def _print_dry_run(
    ctx: click.Context,
    data: Any,
    overrides: tuple[str, ...],
    inventory_path: Path | None,
    gpus_per_node: int | None,
    gpu_memory: float | None = None,
) -> None:
    """``rlinf train --dry-run``: the resolved config, then the plan (or why there is none), and
    each role's estimated memory (:mod:`rlinf_algos.memory`)."""
    import yaml

    from rlinf_algos.config.prepare import prepare_run
    from rlinf_core.config import load_yaml

    inventory: Any = None
    if inventory_path is not None:
        inventory = load_yaml(inventory_path)
    elif gpus_per_node is not None:
        inventory = gpus_per_node  # every node has that many (the scheduler's plan_placement)
    out = prepare_run(
        data, overrides, host=get_host(ctx), plan=True, inventory=inventory, gpu_memory_gib=gpu_memory
    ).report()
    expansion = out.get("expansion")
    if expansion is not None:
        click.echo("# worker-pool form (seed 003) expanded:")
        for note in expansion.notes:
            click.echo(f"#   {note}")
        click.echo("# the cluster section it became")
        click.echo(yaml.safe_dump({"cluster": out["config"]["cluster"]}, sort_keys=False), nl=False)
        click.echo("")
    click.echo("# resolved configuration (what config.yaml of the run would hold)")
    click.echo(yaml.safe_dump(out["config"], sort_keys=False), nl=False)
    click.echo(f"\n# scheduler: {out['scheduler']}")
    if out["config"].get("tools"):
        from rlinf_algos.tools.checks import describe_tools

        for line in describe_tools(out["config"]["tools"]):
            click.echo(f"# {line}")
    if out["plan"] is None:
        click.echo("# placement: none (runner.scheduler: local trains in this process)")
        _echo_weight_sync(out.get("weight_sync"))
        _echo_devices(out.get("devices") or {})
        _echo_memory(out.get("memory"))
        return
    if out.get("inventory_implied"):
        nodes = ", ".join(f"node {n['node_ranks']}: {n['gpus']} GPUs" for n in expansion.inventory["nodes"])
        click.echo(
            f"# inventory: implied by the worker pools ({nodes}); --inventory FILE plans against yours"
        )
    click.echo("# placement plan")
    click.echo(out["plan"].render(), nl=False)
    for name, why in (out.get("idle") or {}).items():
        click.echo(f"# not started: {name} ({why})")
    _echo_devices(out.get("devices") or {})
    _echo_weight_sync(out.get("weight_sync"))
    _echo_memory(out.get("memory"))
    click.echo("# dry run: nothing was started")


def _echo_weight_sync(sync: dict[str, Any] | None) -> None:
    """The ``# weight sync`` line of ``--dry-run``: the mode ``rollout.weight_sync`` resolves to
    against the planned devices, and its members."""
    if not sync:
        return
    if sync["mode"] == "local":
        click.echo(
            f"# weight sync: none needed in process (rollout.weight_sync: {sync['requested']} applies to placed runs)"
        )
        return
    from rlinf_core.weights import shared_gpus

    members = ", ".join(f"{who} on {dev}" for who, dev in sync["members"].items()) or "devices unknown"
    why = "".join(
        f"; {', '.join(labels)} share a GPU, which NCCL refuses" for labels in shared_gpus(sync["members"])
    )
    click.echo(f"# weight sync: {sync['mode']} (rollout.weight_sync: {sync['requested']}; {members}{why})")


def _echo_memory(memory: Any) -> None:
    """The ``# memory`` block of ``--dry-run`` (a language-model run's roles)."""
    from rlinf_algos.memory import format_memory

    if memory:
        for line in format_memory(memory):
            click.echo(line)


def _echo_devices(devices: dict[str, Any]) -> None:
    """The ``# devices`` block of ``--dry-run``: each role's device per rank, and torch's CUDA
    version (with the driver's when this machine sees a GPU)."""
    from rlinf_algos.devices import device_report

    click.echo("# devices (per rank, under runner.device; rollout and reference follow their placement)")
    for name, ranks in devices.items():
        click.echo(f"#   {name}: {', '.join(ranks)}")
    rep = device_report()
    cuda = rep["torch_cuda"]
    line = f"# torch {rep['torch']} (CUDA {cuda if cuda != 'none' else 'none: a CPU build'})"
    line += f"; this machine: {rep['gpus']} GPU(s), NVIDIA driver {rep['driver']}"
    click.echo(line)


def _run_dir_of(summary: dict[str, Any]) -> str:
    return str(summary.get("run_dir", "(see runs/)"))


@click.command("eval")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--episodes", "-n", type=click.IntRange(min=1), default=10, show_default=True)
@click.option(
    "--seed",
    type=int,
    default=10_000,
    show_default=True,
    help="Episode i starts from a reset with seed SEED + i.",
)
@click.option("--stochastic", is_flag=True, help="Sample actions instead of taking the mean.")
@click.option(
    "--warm-start",
    is_flag=True,
    help="Evaluate the weights RL started from (RUN_DIR/warm_start.safetensors, model.warm_start) "
    "instead of the final policy.",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@trust_option
@click.option(
    "--video",
    "video_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write one video per episode into this folder (MP4, or GIF without an encoder).",
)
@click.option(
    "--data",
    "data_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Language-model runs: score on this prompt file (the run's data format), not its validation set.",
)
@click.option(
    "--samples",
    "-k",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Language-model runs: responses per prompt, for pass@k (1: greedy).",
)
@click.option(
    "--suite",
    default=None,
    help="FAMILY:SUITE (metaworld:MT10, metaworld:reach-v3): every task of the suite from its fixed "
    "initial states, a success vector with 95% Wilson intervals. RUN_DIR may then be `expert` or `random`.",
)
@click.option(
    "--episodes-per-task",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="With --suite: episodes per task (episode e starts from the task's fixed initial state e).",
)
@click.option(
    "--out",
    "out_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="With --suite: write the result JSON here (default RUN_DIR/eval/<suite>-seed<SEED>.json).",
)
@click.option("--env-python", default=None, help="With --suite: the simulator's interpreter (env.python).")
def eval_cmd(
    run_dir: Path,
    episodes: int,
    seed: int,
    stochastic: bool,
    warm_start: bool,
    as_json: bool,
    trust: bool,
    video_dir: Path | None,
    data_file: Path | None = None,
    samples: int = 1,
    suite: str | None = None,
    episodes_per_task: int = 50,
    out_file: Path | None = None,
    env_python: str | None = None,
) -> None:
    """Run the final policy of RUN_DIR for N episodes (seeds SEED, SEED+1, ...): the return and
    length, and for envs that report info["success"] the success rates success_once (at some
    step) and success_at_end (at the last step), overall and per instruction. The same command
    gives the same numbers.

    A language-model run's policy/ is scored on its validation set or --data FILE: score,
    accuracy, pass@k with --samples K, per data_source.

    With --suite FAMILY:SUITE: each task of the suite for --episodes-per-task episodes, from the
    task's fixed initial states; per task success_at_end and success_once with 95% Wilson
    intervals, the mean over tasks; JSON with what produced it (RUN_DIR/eval/ or --out).

    Code the run names (a module:Env-vN env id, env wrappers, tool and reward files,
    model.trust_remote_code) is imported only where an installed plugin provides it, or with --trust."""
    if suite is not None:
        _eval_suite(
            run_dir,
            suite,
            episodes_per_task,
            seed,
            stochastic,
            warm_start,
            as_json,
            video_dir,
            out_file,
            env_python,
            trust,
        )
        return
    from rlinf_algos.lm.evaluate import is_lm_run, lm_eval_lines

    if is_lm_run(run_dir):
        from rlinf_algos.code_refs import check_references, run_config_references

        check_references(run_config_references(run_dir), f"evaluating {run_dir}", trust=trust)
        click.echo("\n".join(lm_eval_lines(run_dir, data_file, samples, seed, as_json)))
        return
    if data_file is not None or samples != 1:
        raise click.UsageError("--data and --samples go with a language-model run (RUN_DIR/policy/)")
    from rlinf_algos.evaluate import evaluate_policy
    from rlinf_algos.run_files import policy_file, warm_start_file

    path = warm_start_file(run_dir) if warm_start else policy_file(run_dir)
    res = evaluate_policy(
        path, episodes=episodes, seed=seed, deterministic=not stochastic, video_dir=video_dir, trust=trust
    )
    if as_json:
        click.echo(json.dumps(res))
        return

    def line(name: str, r: dict[str, Any]) -> str:
        text = f"{name}: return {r['return']['mean']:.2f} +- {r['return']['std']:.2f}, length {r['length']['mean']:.1f}"
        if r.get("success_once") is not None:
            text += (
                f", success rate {r['success_at_end']:.2f} at the end ({r['success_once']:.2f} at some step)"
            )
        return text

    click.echo(line(f"{episodes} episodes", res) + f" (seeds {seed}..{seed + episodes - 1})")
    for instruction, r in res["per_instruction"].items():
        click.echo("  " + line(f"{instruction!r} ({r['episodes']})", r))
    if video_dir is not None:
        click.echo(f"videos: {video_dir} ({len(res['per_episode'])} files)")


def _eval_suite(
    run_dir: Path,
    suite: str,
    episodes_per_task: int,
    seed: int,
    stochastic: bool,
    warm_start: bool,
    as_json: bool,
    video_dir: Path | None,
    out_file: Path | None,
    env_python: str | None,
    trust: bool,
) -> None:
    from rlinf_algos.evaluate import check_run_code
    from rlinf_algos.run_files import policy_file, read_state, warm_start_file
    from rlinf_algos.suite_eval import BASELINES, evaluate_suite, summary_lines, write_result

    baseline = str(run_dir) in BASELINES and not run_dir.exists()
    policy: str | Path = (
        str(run_dir) if baseline else (warm_start_file(run_dir) if warm_start else policy_file(run_dir))
    )
    if not baseline and Path(policy).is_file():
        check_run_code(Path(policy), read_state(Path(policy)), trust=trust)
    res = evaluate_suite(
        policy,
        suite,
        episodes_per_task=episodes_per_task,
        seed=seed,
        deterministic=not stochastic,
        video_dir=video_dir,
        python=env_python,
        say=None if as_json else click.echo,
    )
    if out_file is None and not baseline:
        out_file = run_dir / "eval" / f"{suite.replace(':', '_')}-seed{seed}.json"
    if out_file is not None:
        write_result(out_file, res)
    if as_json:
        click.echo(json.dumps({k: v for k, v in res.items() if k != "per_episode"}))
        return
    for text in summary_lines(res)[len(res["tasks"]) :]:
        click.echo(text)
    if out_file is not None:
        click.echo(f"result: {out_file}")


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
