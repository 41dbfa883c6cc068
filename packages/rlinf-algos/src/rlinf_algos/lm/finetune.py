"""Supervised fine-tuning of a causal language model on prompt-response pairs (``rlinf sft``).

The run YAML has four sections (five with ``tools``): ``model`` (:class:`~rlinf_algos.lm.config.LMModelConfig`: a
model folder, or ``init`` to build one), ``data`` (:class:`SFTDataConfig`: the ``data`` section
of a GRPO run plus ``response_key``), ``train`` (:class:`SFTTrainConfig`) and ``runner``
(:class:`SFTRunnerConfig`). :func:`train_sft` runs the ``sft`` flow with the one driver
(:mod:`rlinf_algos.lm.sft_flow`) and writes ``RUN_DIR``:

- ``config.yaml``: the validated sections, defaults filled in (written once the examples are
  tokenized, before training);
- ``base_model/``: the model ``model.init`` built (its bpe tokenizer trained on the data's
  prompts and responses), when it is used;
- ``metrics.csv``: one row per ``runner.log_interval`` steps (:data:`METRIC_COLUMNS`), each
  once, also after a resume; the other ``runner.loggers`` get the same rows;
- ``checkpoints/step_<n>/``: every ``runner.checkpoint_interval`` steps and on SIGTERM or
  Ctrl-C (``rlinf sft CONFIG --resume RUN_DIR`` continues from the newest);
- ``summary.json``: ``val_loss_before``/``_after`` (mean token NLL of the validation responses),
  ``val_exact_match_before``/``_after`` (with ``train.eval_generate``), steps, seconds,
  trainable and total parameters, the seeds, what was filtered, ``interrupted``, the driver's
  counters (``resumed_from``...);
- ``val_generations.json``: the greedy outputs behind the exact match (with ``train.eval_generate``);
- ``policy/``: a model folder ``AutoModelForCausalLM.from_pretrained`` and
  ``AutoTokenizer.from_pretrained`` load (merged when LoRA); ``adapter/``: the peft adapter
  (``PeftModel.from_pretrained``), when ``model.lora`` is set.

How rows become examples, and the evaluation, are :mod:`rlinf_algos.lm.sft_data`'s (re-exported
here). Reproducible from ``runner.seed`` (the model ``init``, LoRA's initial weights, dropout) and
``data.seed`` (the order of the examples: a fresh permutation every epoch, drawn from both seeds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlinf_algos.lm.sft_config import (
    SFTDataConfig,
    SFTRunConfig,
    SFTRunnerConfig,
    SFTTrainConfig,
    load_sft_config,
)
from rlinf_algos.lm.sft_data import (
    Example,
    ExampleSet,
    check_sft_sources,
    conversation_example,
    encode_example,
    load_examples,
    lr_at,
    token_nll,
    tool_schemas,
)
from rlinf_algos.lm.sft_flow import METRIC_COLUMNS, run_sft

__all__ = [
    "METRIC_COLUMNS",
    "Example",
    "ExampleSet",
    "SFTDataConfig",
    "SFTResult",
    "SFTRunConfig",
    "SFTRunnerConfig",
    "SFTTrainConfig",
    "check_sft_sources",
    "conversation_example",
    "encode_example",
    "load_examples",
    "load_sft_config",
    "lr_at",
    "token_nll",
    "tool_schemas",
    "train_sft",
]


@dataclass
class SFTResult:
    """What :func:`train_sft` returns: the summary (as written to ``summary.json``) and the
    trained model (a ``PeftModel`` when LoRA is on) with its tokenizer
    (:class:`~rlinf_algos.lm.tokens.LMTokenizer`). ``summary["summary_text"]`` is the one-line
    result."""

    summary: dict[str, Any]
    model: Any
    tokenizer: Any


def train_sft(
    run: SFTRunConfig,
    run_dir: str | Path,
    log: Callable[[str], None] | None = print,
    *,
    overwrite: bool = False,
    resume: bool = False,
    command: str | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> SFTResult:
    """Fine-tune ``run.model`` on ``run.data`` and write ``run_dir`` (see the module docstring).

    The data files, keys and the model folder are checked before the run directory is touched,
    and ``config.yaml`` (what makes it a run's) is written once the tokenized examples are
    ready, so a configuration mistake never leaves a run behind that ``--overwrite`` would have
    to move. ``resume``: continue the run of ``run_dir`` from its newest checkpoint. ``command``
    (the command line) is recorded in ``summary.json``; ``progress`` is called with every
    metrics row (and its ``total_steps``). Returns the summary and the trained model.

    Raises:
        ConfigError: a problem with the configuration, a model folder, a data file or row (each
            with its YAML path), or a resumed run's ``model`` section changed.
        RlinfError: ``run_dir`` holds a run and neither ``overwrite`` nor ``resume`` is given;
            ``resume`` and ``run_dir`` holds no checkpoint.
        TrainingInterrupted: SIGTERM or Ctrl-C stopped the run (its checkpoint, metrics,
            policy and summary are written).
    """
    from rlinf_algos.lm.tokens import LMTokenizer
    from rlinf_algos.rundir import latest_checkpoint, prepare_run_dir, remove_stale_temp_files
    from rlinf_core.errors import RlinfError

    say = log or (lambda _msg: None)
    check_sft_sources(run)  # everything that can be checked without the run directory
    run_dir = Path(run_dir)
    if resume:
        if overwrite:
            raise RlinfError("--overwrite starts a new run; --resume continues one: give one of them")
        if latest_checkpoint(run_dir) is None:
            raise RlinfError(
                f"nothing to resume in {run_dir}: no checkpoints/step_<n>/ there (an sft run writes one on "
                "SIGTERM or Ctrl-C, and every runner.checkpoint_interval steps)"
            )
        for stale in remove_stale_temp_files(run_dir):
            say(f"removed {stale}, left by a run killed while it wrote a file")
    else:
        run_dir = prepare_run_dir(run_dir, overwrite, say)
    summary, model = run_sft(run, run_dir, say=say, resume=resume, command=command, progress=progress)
    if model is None:  # the learner was placed in a worker: the written policy
        from rlinf_algos.lm.model_type import load_lm_model

        written = {"path": str(run_dir / "policy"), "init": None, "lora": None, "dtype": "float32"}
        model = load_lm_model(run.model.model_copy(update=written))
    return SFTResult(summary, model, LMTokenizer.from_folder(run_dir / "policy", run.model.trust_remote_code))
