"""``rlinf sft``: supervised fine-tuning of a Hugging Face causal LM on prompt-response pairs
(:mod:`rlinf_algos.lm.finetune`), writing a model folder.

Light at import: click and rlinf_core only; the command imports torch and transformers when it
runs. Errors meant for the user are :class:`~rlinf_core.errors.RlinfError` (a
:class:`~rlinf_core.errors.ConfigError` names the YAML path), which the ``rlinf`` console script
prints as one line without a traceback.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from rlinf_algos.cli_options import overwrite_option, run_dir_option

__all__ = ["sft_cmd"]


@click.command("sft")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("overrides", nargs=-1)
@run_dir_option
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
    target = run_dir or default_run_dir(config)
    command = shlex.join(["rlinf", "sft", str(config), *overrides, "--run-dir", str(target)])

    def log(msg: str) -> None:
        click.echo(msg, err=True)

    from rlinf_algos.progress_bar import ProgressBar

    bar = None if quiet else ProgressBar()
    try:
        result = train_sft(
            run, target, None if quiet else log, overwrite=overwrite, command=command, progress=bar
        )
    finally:
        if bar is not None:
            bar.close()
    click.echo(result.summary["summary_text"])
    click.echo(f"run directory: {target}")
