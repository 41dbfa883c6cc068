"""``rlinf sft``: supervised fine-tuning of a Hugging Face causal LM on prompt-response pairs
(:mod:`rlinf_algos.lm.finetune`), writing a model folder.

Light at import: click and rlinf_core only; the command imports torch and transformers when it
runs. Errors meant for the user are :class:`~rlinf_core.errors.RlinfError` (a
:class:`~rlinf_core.errors.ConfigError` names the YAML path), which the ``rlinf`` console script
prints as one line without a traceback.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from rlinf_algos.cli_options import StopOnTerm, overwrite_option, run_dir_option

__all__ = ["sft_cmd"]


@click.command("sft")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("overrides", nargs=-1)
@run_dir_option
@click.option(
    "--resume",
    "resume_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Continue the run in this directory from its newest checkpoint (SIGTERM and Ctrl-C write one).",
)
@overwrite_option
@click.option("--quiet", is_flag=True, help="Print the summary line only (no progress bar).")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check the config, the data files (read through), the model folder and the device, print "
    "the resolved config, and exit without training or writing anything.",
)
def sft_cmd(
    config: Path,
    overrides: tuple[str, ...],
    run_dir: Path | None,
    resume_dir: Path | None,
    overwrite: bool,
    quiet: bool,
    dry_run: bool,
) -> None:
    """Fine-tune a model folder on the prompt-response pairs (or conversations) of CONFIG.yaml.

    CONFIG has the sections `model` (`path: DIR`, or `init` to build a small model), `data`
    (`train_files`, `val_files`, `prompt_key`, `response_key`... or `messages_key` for TRL-format
    conversations with tool calls, whose schemas come from a `tools` section), `train` and `runner`.
    OVERRIDES are dotted `key=value` settings applied on top (values are YAML):
    `rlinf sft examples/grpo_verl_format/sft.yaml train.steps=50 runner.seed=1`.

    The run directory gets config.yaml, metrics.csv, summary.json (validation loss before and
    after), policy/ (a model folder transformers loads; merged when LoRA) and adapter/ with LoRA.
    Ctrl-C or SIGTERM writes a checkpoint first; --resume RUN_DIR continues it.
    """
    from rlinf_algos.config.prepare import compose_run_config
    from rlinf_algos.lm.finetune import check_sft_sources, load_sft_config, train_sft
    from rlinf_algos.rundir import default_run_dir

    run = load_sft_config(compose_run_config(config, overrides))  # composed as rlinf train composes
    if dry_run:
        import yaml

        texts = check_sft_sources(run)
        from rlinf_core.compose import mask_secrets

        click.echo(yaml.safe_dump(mask_secrets(run.model_dump(mode="json")), sort_keys=False), nl=False)
        click.echo(f"# {len(texts)} training examples; dry run: nothing was trained or written")
        return
    if resume_dir is not None and run_dir is not None and resume_dir != run_dir:
        raise click.UsageError("give --resume RUN_DIR or --run-dir DIR, not both")
    if overwrite and resume_dir is not None:
        raise click.UsageError("--overwrite starts a new run; --resume continues one: give one of them")
    target = resume_dir or run_dir or default_run_dir(config)
    given = ["--resume", str(target)] if resume_dir is not None else ["--run-dir", str(target)]
    command = shlex.join(["rlinf", "sft", str(config), *overrides, *given])

    def log(msg: str) -> None:
        click.echo(msg, err=True)

    from rlinf_algos.progress_bar import ProgressBar
    from rlinf_algos.training import TrainingInterrupted

    bar = None if quiet else ProgressBar()
    stop_signal = StopOnTerm()
    try:
        result = train_sft(
            run,
            target,
            None if quiet else log,
            overwrite=overwrite,
            resume=resume_dir is not None,
            command=command,
            progress=bar,
        )
    except (TrainingInterrupted, KeyboardInterrupt) as stop:
        if bar is not None:
            bar.close()
            bar = None
        what = "terminated (SIGTERM)" if stop_signal.received else "interrupted"
        if isinstance(stop, TrainingInterrupted) and stop.checkpoint is not None:
            # the overrides too: without them the resumed run would take the file's settings
            again = shlex.join(["rlinf", "sft", str(config), *overrides, "--resume", str(stop.run_dir)])
            click.echo(
                f"{what}: wrote {stop.checkpoint}, the metrics, the policy and summary.json; continue with "
                f"`{again}`",
                err=True,
            )
        else:
            click.echo(f"{what} before training started (run directory {target})", err=True)
        sys.exit(143 if stop_signal.received else 130)
    finally:
        stop_signal.restore()
        if bar is not None:
            bar.close()
    click.echo(result.summary["summary_text"])
    click.echo(f"run directory: {target}")
