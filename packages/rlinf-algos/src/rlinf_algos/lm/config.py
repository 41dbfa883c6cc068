"""Configuration models of the LLM GRPO examples (``examples/grpo_arith.yaml``,
``examples/grpo_multiagent.yaml``).

Light on purpose: pydantic and rlinf_core only, so a driver (or the ``rlinf train`` runner) can
validate a YAML without torch. The sections:

===============  =========================  ==================================================
YAML section     model                      what it holds
===============  =========================  ==================================================
``algorithm``    :class:`LMGRPOConfig`      GRPO options (``name: grpo_lm``): group size,
                                            prompts per iteration, clip, KL, learning rate...
``model``        :class:`LMModelConfig`     the causal language model (``type: hf``, the
                                            registered :class:`~rlinf_algos.lm.model_type.HFModels`)
``task``         :class:`ArithTaskConfig`   the arithmetic task family, its verifier and the
                                            multi-agent mode
``sft``          :class:`SFTConfig`         the supervised warm start the example runs first
``runner``       :class:`LMRunnerConfig`    budget, evaluation, seed, threads, checkpoints
===============  =========================  ==================================================

:func:`load_lm_sections` validates them all and reports every problem at once, each with its
YAML path (``task.num_terms``, ``algorithm.group_size``...).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    field_validator,
    model_validator,
)

from rlinf_algos.config import ActorConfig, LoraConfig
from rlinf_algos.config.validated import carried_sections
from rlinf_algos.lm.algorithm_config import (
    ASK_DESCRIPTION,
    DynamicSamplingConfig,
    LMGRPOConfig,
    LMPPOConfig,
    OverlongConfig,
    SubagentsConfig,
)
from rlinf_algos.lm.algorithm_registry import BUILT_IN, lm_algorithm_config
from rlinf_algos.lm.data import DataConfig
from rlinf_algos.lm.sections import (
    CriticConfig,
    LMModelConfig,
    Loggers,
    ModelInitConfig,
    ToolsConfig,
    require_wandb,
)
from rlinf_algos.weight_sync import WeightSyncMode, weight_sync_field
from rlinf_core.config import ConfigSection, validate_model
from rlinf_core.errors import ConfigError, ConfigProblem

__all__ = [
    "ALGORITHM_CONFIGS",
    "ASK_DESCRIPTION",
    "ArithTaskConfig",
    "CriticConfig",
    "DynamicSamplingConfig",
    "LMGRPOConfig",
    "LMModelConfig",
    "LMPPOConfig",
    "LMRunConfig",
    "LMRunnerConfig",
    "Loggers",
    "LoraConfig",
    "ModelInitConfig",
    "OverlongConfig",
    "SFTConfig",
    "SubagentsConfig",
    "ToolsConfig",
    "load_lm_sections",
    "require_wandb",
    "resolved_lm_config",
    "validate_lm_sections",
]

_STRICT = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)


class ArithTaskConfig(ConfigSection):
    """``task`` section: sums of ``num_terms`` numbers of ``min_digits``..``max_digits`` digits,
    solved as a chain of two-operand steps, checked exactly.

    ``mode: single`` asks one agent for the sum. ``mode: multiagent`` (WideSeek-R1 style) asks for a
    sum of ``num_groups`` parenthesised groups: a lead agent splits it into sub-tasks, one
    subagent per group solves its own sum in an isolated context, and the lead sums their
    answers. ``mode: flat`` is the single-agent baseline on the same grouped problems: one agent
    holding the full context chains through every term.
    """

    model_config = _STRICT

    name: Literal["arith"] = "arith"
    mode: Literal["single", "multiagent", "flat"] = "single"
    num_terms: list[int] = Field(
        default_factory=lambda: [3, 4], min_length=1, description="terms per sum (per group), drawn uniformly"
    )
    min_digits: int = Field(2, ge=1, le=6)
    max_digits: int = Field(3, ge=1, le=6)
    num_groups: int = Field(3, ge=2, le=8, description="groups per problem in multiagent/flat mode")
    max_calls: int = Field(8, ge=1, description="subagent calls a lead may make before its episode fails")
    format_reward: float = Field(
        0.0, ge=0.0, lt=1.0, description="reward of well-formed output with a wrong answer (0 turns it off)"
    )
    eval_size: int = Field(256, ge=1, description="held-out problems")
    eval_seed: int = Field(12345, ge=0, description="seed of the held-out set (fixed across runs)")

    @model_validator(mode="after")
    def _ranges(self) -> ArithTaskConfig:
        if self.min_digits > self.max_digits:
            raise ValueError(f"min_digits ({self.min_digits}) must not exceed max_digits ({self.max_digits})")
        bad = [n for n in self.num_terms if n < 2 or n > 12]
        if bad:
            raise ValueError(f"num_terms must be between 2 and 12, got {bad}")
        return self


class SFTConfig(ConfigSection):
    """``sft`` section: the arithmetic task's supervised warm start, an ``rlinf sft`` run on a
    teacher's solutions written to ``RUN_DIR/warm_start/data`` (:mod:`rlinf_algos.lm.sft`).
    Deliberately short, so the policy GRPO starts from is sometimes right."""

    model_config = _STRICT

    steps: int = Field(300, ge=0, description="gradient steps (0 skips the warm start)")
    batch_size: int = Field(
        64,
        ge=1,
        description="problems per step (each gives a row per trained turn: the train.batch_size of rlinf sft)",
    )
    lr: float = Field(
        1e-3, gt=0.0, description="peak AdamW learning rate (betas 0.9, 0.99; cosine decay to lr / 10)"
    )
    warmup_steps: int = Field(20, ge=0, description="steps of linear warm-up")
    target_accuracy: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="stop early once the greedy outputs on the check_size validation problems' turns (a "
        "perfect teacher's, not the held-out set) match this fraction exactly (rlinf sft's "
        "train.stop_at_exact_match)",
    )
    carry_drop: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="the demonstrating teacher forgets each carry with this probability (0: a perfect "
        "teacher); the warm start then imitates a careless teacher, and the verifier's reward is what "
        "teaches the policy to carry every time",
    )
    answer_slip: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="the demonstrating teacher copies the last running sum into the answer as the "
        "scratchpad writes it (digits reversed) with this probability (0: never)",
    )
    slip_scope: Literal["final", "every"] = Field(
        "final",
        description="which chains answer_slip applies to: 'final', the chain whose answer the verifier "
        "reads (the lead's last turn in multiagent mode, the one chain otherwise), or 'every' chain "
        "(the subagents' too, so in multiagent mode the slips compound over the chains of a problem)",
    )
    check_interval: int = Field(50, ge=1, description="steps between target_accuracy checks")
    check_size: int = Field(
        64,
        ge=1,
        description="validation problems (a perfect teacher's solutions): the validation loss and exact "
        "match the warm start reports, and the target_accuracy checks",
    )


class LMRunnerConfig(ConfigSection):
    """``runner`` section of the in-process GRPO loop."""

    model_config = _STRICT

    seed: int = Field(0, ge=0)
    torch_threads: int = Field(2, ge=1)
    eval_interval: int = Field(
        0, ge=0, description="iterations between held-out evaluations; 0: start and end only"
    )
    log_interval: int = Field(1, ge=1, description="iterations between log lines")
    checkpoint_interval: int = Field(
        20,
        ge=0,
        description="iterations between checkpoints (checkpoints/step_<n>/, the newest two kept; one is "
        "also written at the end and on SIGTERM or Ctrl-C); 0: only at the end and on a stop",
    )
    time_limit_s: float | None = Field(
        None,
        gt=0.0,
        description="stop GRPO early once its iterations have taken this many seconds (the warm start and "
        "the held-out evaluation before training do not count; a resumed run counts its earlier GRPO seconds)",
    )
    eval_temperature: float = Field(0.0, ge=0.0, description="0 is greedy decoding (the reported accuracy)")
    scheduler: str | None = Field(
        None,
        min_length=1,
        description="`local`: every component in the rlinf process; `ray` (or another registered "
        "scheduler): rollout, reward, reference, actor (and agent) workers placed by the `cluster` "
        "section, batches over Channels, weights through the broadcast; null: the algorithm's default",
    )
    worker_timeout: float = Field(
        600.0,
        gt=0.0,
        description="seconds the distributed runner waits on a worker or channel before saying which",
    )
    max_restarts: int = Field(
        10,
        ge=0,
        description="worker restarts allowed in one distributed run before giving up: a dead rollout, "
        "reward or agent worker is restarted and its iteration's partial batch dropped and run again",
    )
    loggers: Loggers = Field(
        default_factory=lambda: ["csv", "tensorboard"],
        description="metrics backends: csv (metrics.csv), tensorboard (RUN_DIR/tensorboard), wandb "
        "(needs the wandb package; WANDB_MODE=offline works without a network; --resume continues the "
        "same wandb run); the same scalars go to each",
    )
    device: str = Field(
        "auto",
        description="torch device of the distributed actor (learner): auto (the first GPU its placement "
        "gives it, else the CPU), cpu, cuda or cuda:N; a CUDA device the placement does not give is an error",
    )


class LMRolloutConfig(ConfigSection):
    """``rollout`` section of a language-model run: which engine samples the responses."""

    model_config = _STRICT

    engine: str = Field(
        "hf",
        min_length=1,
        description="a registered rollout engine: hf (Hugging Face generate with a KV cache), or one "
        "a plugin registers with the rlinf_register_rollout_engines hook (vLLM, SGLang on GPU machines)",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments of the engine's constructor (hf takes none)"
    )
    weight_sync: WeightSyncMode = weight_sync_field()
    max_staleness: int = Field(
        0,
        ge=0,
        description="how many weight versions the policy that generated a sample may lag the learner that "
        "trains on it: k > 0 generates the batches of the next k iterations while the learner trains on "
        "this one, and the loss corrects for the lag (decoupled PPO); 0 is today's synchronous loop. The "
        "same key as an embodied run's (whose default is 1)",
    )


DEFAULT_REWARD = "math"
"""``reward.name`` when neither it nor ``reward.path`` is set."""

VERL_DEFAULT_NAME = "compute_score"
"""``reward.name`` when ``reward.path`` is set and ``reward.name`` is not (verl's name)."""


class RewardConfig(BaseModel):
    """``reward`` section: which reward scores the completions."""

    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)

    name: str | None = Field(
        None,
        min_length=1,
        description="the function in reward.path, or a registered reward (exact_match, math, arith; "
        "`rlinf plugins` lists them); null: compute_score when reward.path is set, else math",
    )
    path: str | None = Field(
        None,
        min_length=1,
        description="a Python file defining verl's compute_score(data_source, solution_str, ground_truth, "
        "extra_info=None) or a TRL-style callable (completions, **columns) -> list[float]; relative to "
        "the working directory",
    )
    kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="keyword arguments: a registered reward's constructor's, or passed on every call "
        "to a file's function",
    )
    conversational: bool | None = Field(
        None,
        strict=True,
        description="TRL-style callables only: pass completions and prompts as chat messages (as TRL does "
        "for conversational data); null: when the sample's prompt is a list of messages",
    )
    timeout_s: float = Field(
        30.0,
        gt=0,
        le=86400,
        description="seconds one call of a reward you bring (reward.path or a plugin's) may take; past "
        "it the call is stopped (its process killed) and the sample fails as reward.on_error says",
    )
    on_error: Literal["stop", "zero"] = Field(
        "stop",
        description="a reward you bring that raises, times out, exits or returns a non-number: stop the "
        "run with a one-line message naming the sample (stop), or score the sample 0, count it in "
        "reward_failures and go on (zero)",
    )

    @field_validator("kwargs")
    @classmethod
    def _finite(cls, value: dict[str, Any]) -> dict[str, Any]:
        def walk(v: Any, where: str) -> None:
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError(f"{where} must be a finite number, got {v}")
            if isinstance(v, Mapping):
                for k, x in v.items():
                    walk(x, f"{where}.{k}")
            elif isinstance(v, list | tuple):
                for i, x in enumerate(v):
                    walk(x, f"{where}[{i}]")

        for k, v in value.items():
            walk(v, str(k))
        return value

    @model_validator(mode="after")
    def _default_name(self) -> RewardConfig:
        if self.name is None:
            self.name = VERL_DEFAULT_NAME if self.path is not None else DEFAULT_REWARD
        return self


class LMRunConfig(BaseModel):
    """The validated sections together. ``data`` and ``reward`` are set on a data set run (then
    the arithmetic ``task`` and its ``sft`` warm start are not used)."""

    algorithm: SerializeAsAny[LMGRPOConfig]
    """By ``algorithm.name``: any registered language-model algorithm's section
    (:func:`~rlinf_algos.lm.algorithm_registry.lm_algorithm_config`)."""
    model: SerializeAsAny[LMModelConfig]
    task: ArithTaskConfig
    sft: SFTConfig
    runner: LMRunnerConfig
    data: DataConfig | None = None
    reward: RewardConfig | None = None
    critic: CriticConfig = Field(default_factory=lambda: CriticConfig())
    actor: ActorConfig = Field(default_factory=lambda: ActorConfig())
    rollout: LMRolloutConfig = Field(default_factory=lambda: LMRolloutConfig())
    tools: ToolsConfig | None = None

    @field_validator("algorithm", mode="before")
    @classmethod
    def _by_name(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return lm_algorithm_config(value.get("name")).model_validate(value)
        return value


_SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("algorithm", LMGRPOConfig),
    ("model", LMModelConfig),
    ("task", ArithTaskConfig),
    ("sft", SFTConfig),
    ("runner", LMRunnerConfig),
    ("data", DataConfig),
    ("reward", RewardConfig),
    ("critic", CriticConfig),
    ("actor", ActorConfig),
    ("rollout", LMRolloutConfig),
    ("tools", ToolsConfig),
)
ALGORITHM_CONFIGS: dict[str, type[LMGRPOConfig]] = BUILT_IN
"""rlinf-algos' own language-model algorithms' ``algorithm`` section models; every registered
one: :func:`~rlinf_algos.lm.algorithm_registry.lm_algorithm_config`."""
_OPTIONAL = ("data", "reward", "tools")


def load_lm_sections(run_config: Mapping[str, Any] | Any) -> LMRunConfig:
    """The validated sections of a language-model run: those a validated configuration carries
    (:class:`~rlinf_algos.config.validated.ValidatedConfig`), else
    :func:`validate_lm_sections` of ``run_config``."""
    carried = carried_sections(run_config, LMRunConfig)
    return carried if carried is not None else validate_lm_sections(run_config)


def validate_lm_sections(
    run_config: Mapping[str, Any] | Any, algorithm: BaseModel | None = None, host: Any = None
) -> LMRunConfig:
    """Validate the ``algorithm``, ``model``, ``task``, ``sft`` and ``runner`` sections of a run
    YAML (a mapping or an object with those attributes); a missing section takes its defaults,
    except ``algorithm`` whose ``name`` must be ``grpo_lm``. Every problem of every section is
    reported in one :class:`ConfigError` with its YAML path. ``algorithm``: the ``algorithm``
    section already validated (it is taken as it is); ``host``: the plugin host whose model types
    count for ``model.type`` (default: the installed plugins)."""
    from rlinf_algos.models import validate_model_section

    problems: list[ConfigProblem] = []
    out: dict[str, BaseModel] = {}
    for name, model in _SECTIONS:
        data = run_config.get(name) if isinstance(run_config, Mapping) else getattr(run_config, name, None)
        if name == "algorithm" and isinstance(algorithm, LMGRPOConfig):
            out[name] = algorithm
            continue
        if isinstance(data, BaseModel):
            data = data.model_dump()
        if data is None:
            if name == "algorithm":
                problems.append(ConfigProblem(name, "missing section (needs at least `name: grpo_lm`)"))
                continue
            if name in _OPTIONAL:
                continue
            data = {}
        try:
            if name == "algorithm" and isinstance(data, Mapping):
                model = lm_algorithm_config(data.get("name"), host)
            if name == "model":
                out[name] = validate_model_section(data, LMModelConfig, prefix=name, host=host)
            else:
                out[name] = validate_model(model, data, prefix=name)
        except ConfigError as err:
            problems.extend(err.problems)
    has = (
        (lambda k: run_config.get(k) is not None)
        if isinstance(run_config, Mapping)
        else (lambda k: getattr(run_config, k, None) is not None)
    )
    if has("data"):
        for name in ("task", "sft"):
            if has(name) and name == "task":
                problems.append(
                    ConfigProblem(
                        "task", "a run with a data section trains on its prompts; remove the task section"
                    )
                )
        if "sft" in out and out["sft"].steps and has("sft"):  # type: ignore[attr-defined]
            problems.append(
                ConfigProblem(
                    "sft.steps",
                    "a data set run does not warm-start in the run; fine-tune first with `rlinf sft` and "
                    "start from its folder (model.path), or set sft.steps=0",
                )
            )
    elif has("reward"):
        problems.append(ConfigProblem("reward", "a reward scores a data set's prompts: add a data section"))
    if has("tools") and not has("data"):
        problems.append(
            ConfigProblem(
                "tools",
                "tool-calling episodes start from a data set's prompts (chat messages) and are scored by "
                "its reward: add a data section (and a reward section)",
            )
        )
    problems += _subagent_problems(out.get("algorithm"), out.get("tools"), has("tools"))
    problems += _staleness_problems(out.get("algorithm"), out.get("rollout"))
    if "tools" in out:  # names, files, kwargs and limits now, not when the tools load in the run
        from rlinf_algos.tools.checks import tool_problems

        problems += tool_problems(out["tools"].entries, plugins=host)  # type: ignore[attr-defined]
    if problems:
        raise ConfigError(problems)
    if "data" in out and "sft" in out and not has("sft"):
        out["sft"] = out["sft"].model_copy(update={"steps": 0})
    if "data" in out and "reward" not in out:
        out["reward"] = RewardConfig()
    return LMRunConfig(**out)


def _staleness_problems(alg: Any, rollout: Any) -> list[ConfigProblem]:
    """What an asynchronous run (``rollout.max_staleness > 0``) cannot be combined with: the
    learner versions count one update per iteration, which DAPO's extra draws break, and an
    algorithm whose learner does not take the behaviour log-probs (``off_policy`` false) cannot."""
    k = int(getattr(rollout, "max_staleness", 0) or 0)
    if alg is None or k == 0:
        return []
    key = "rollout.max_staleness"
    if getattr(alg, "dynamic_sampling", None) is not None:
        return [ConfigProblem(key, f"{k}: an asynchronous run cannot draw more prompts for one update "
                              "(algorithm.dynamic_sampling); use 0 or leave dynamic_sampling out")]  # fmt: skip
    if not getattr(alg, "off_policy", False):
        return [ConfigProblem(key, f"{k}: {alg.name}'s learner does not train on stale samples "
                              "(its learner takes no behaviour log-probs); use 0")]  # fmt: skip
    return []


def _subagent_problems(alg: Any, tools: Any, has_tools: bool) -> list[ConfigProblem]:
    """What is wrong with ``algorithm.subagents`` given the ``tools`` section (the tool names a
    ToolSet defines are checked when the tools load, :func:`~rlinf_algos.lm.agentic.subagents.lead_setup`)."""
    sub = getattr(alg, "subagents", None)
    if sub is None:
        return []
    key = "algorithm.subagents"
    if not has_tools:
        return [
            ConfigProblem(
                key,
                "subagents search with the run's tools: add a tools section (e.g. tools: [{name: search, "
                "kwargs: {corpus: docs.jsonl}}])",
            )
        ]
    if tools is None:
        return []  # the tools section has problems of its own
    names = [e.name for e in tools.entries]
    if sub.tool in names:
        return [
            ConfigProblem(
                f"{key}.tool",
                f"{sub.tool!r} is also a tool of the tools section; name the subagent tool something else",
            )
        ]
    out = []
    for field_name, value in (("tools", sub.tools or []), ("lead_tools", sub.lead_tools)):
        for i, name in enumerate(value):
            if name == sub.tool:
                out.append(ConfigProblem(f"{key}.{field_name}[{i}]", f"{name!r} is the subagent tool itself"))
    if sub.tools is not None and not sub.tools:
        out.append(ConfigProblem(f"{key}.tools", "a subagent needs at least one tool (null: all of them)"))
    return out


def resolved_lm_config(run: LMRunConfig, cluster: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every section of ``run`` with its defaults filled in, as ``config.yaml`` records it and
    ``rlinf train --dry-run`` prints it: fed back to ``rlinf train`` it runs as it is (a data set
    run has no ``task`` section; absent optional sections are left out)."""
    import json

    data: dict[str, Any] = {}
    if cluster is not None:
        data["cluster"] = json.loads(json.dumps(dict(cluster), default=str))
    for key, value in run.model_dump(mode="json").items():
        if value is None or (key == "task" and run.data is not None):
            continue
        if key == "critic" and not isinstance(run.algorithm, LMPPOConfig):
            continue  # only ppo_lm trains a critic
        data[key] = value
    return data
