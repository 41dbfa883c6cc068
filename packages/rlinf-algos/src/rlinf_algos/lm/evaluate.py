"""``rlinf eval RUN`` on a language-model run (``grpo_lm``, ``ppo_lm``): the policy ``RUN/policy/``
scored on the run's held-out set (its ``data.val_files``, or the arithmetic task's generated
held-out problems) or on a given prompt file.

For every problem ``K`` responses are sampled (``--samples K``; one greedy response when ``K``
is 1 and no temperature is given, else at the run's sampling temperature) and scored by the
run's reward. The result: ``score`` (mean reward over every response), ``accuracy`` (the
fraction of responses with reward 1: pass@1), ``pass_at_k`` (the fraction of problems with at
least one of its ``K`` responses right), ``well_formed``, each overall and per ``data_source``
(the column of verl-format rows; ``arith`` for the arithmetic task). The rollout engine's
sampler and torch are seeded with ``--seed``: the same command gives the same numbers.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from rlinf_core.errors import ConfigError, RlinfError

__all__ = ["evaluate_lm_run", "evaluate_policy", "is_lm_run", "lm_eval_lines"]


def is_lm_run(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` is a language-model run's: its ``policy/`` is a model folder."""
    return (Path(run_dir) / "policy" / "config.json").is_file()


def _load_run(run_dir: Path) -> Any:
    from rlinf_algos.lm.config import load_lm_sections
    from rlinf_core.compose import load_config

    path = run_dir / "config.yaml"
    if not path.is_file():
        raise RlinfError(f"no config.yaml in {run_dir}: is it a run directory written by `rlinf train`?")
    data = load_config(path, what="config.yaml of the run")  # composed: ${oc.env:...} resolved again
    if "train" in data and "algorithm" not in data:
        raise RlinfError(
            f"{run_dir} is an `rlinf sft` run: it has no reward to score with (its validation loss and exact "
            f"match are in its summary.json); evaluate a GRPO run that starts from it (model.path={run_dir}/policy)"
        )
    try:
        return load_lm_sections(data)
    except ConfigError as err:
        raise RlinfError(f"{path} is not a language-model run's configuration: {err}") from None


def evaluate_lm_run(
    run_dir: str | Path,
    *,
    data: str | Path | None = None,
    samples: int = 1,
    seed: int = 10_000,
    temperature: float | None = None,
    chunk: int = 64,
) -> dict[str, Any]:
    """Evaluate ``run_dir/policy`` (see the module docstring); ``data``: a prompt file in the
    run's ``data`` format instead of its held-out set (a data set run only)."""
    from rlinf_algos.lm.tasks import is_arith

    if samples < 1:
        raise RlinfError("--samples must be at least 1")
    run_dir = Path(run_dir)
    if not is_lm_run(run_dir):
        raise RlinfError(
            f"no saved policy at {run_dir / 'policy'} (a finished or stopped language-model run writes RUN_DIR/policy/)"
        )
    run = _load_run(run_dir)
    model = run.model.model_copy(update={"path": str(run_dir / "policy"), "init": None, "lora": None})
    run = run.model_copy(update={"model": model})
    if data is not None:
        if is_arith(run):
            raise RlinfError(
                f"--data {data}: {run_dir} trained on the arithmetic task, which is scored on its own "
                "held-out problems; --data takes a run with a data section"
            )
        if not Path(data).is_file():
            raise RlinfError(f"--data {data}: no such file")
        files = [str(data)]
        run = run.model_copy(
            update={"data": run.data.model_copy(update={"train_files": files, "val_files": files})}
        )
    out = evaluate_policy(run, samples=samples, seed=seed, temperature=temperature, chunk=chunk)
    return {
        "run_dir": str(run_dir),
        "policy": str(run_dir / "policy"),
        "data": str(data) if data is not None else "the run's held-out set",
        **out,
    }


def evaluate_policy(
    run: Any, *, samples: int = 1, seed: int = 10_000, temperature: float | None = None, chunk: int = 64
) -> dict[str, Any]:
    """Score the policy of ``run.model.path`` on the held-out set of ``run`` (validated sections),
    as :func:`evaluate_lm_run` describes, in this process: the run's agent (tool-calling
    episodes with a ``tools`` section) with the ``hf`` rollout engine. Returns ``score``,
    ``accuracy``, ``pass_at_k``, ``well_formed``, ``per_data_source`` and, for tool-calling
    episodes, ``tools`` (turns, calls per tool, errors, timeouts, latency, answer rate,
    success: :func:`~rlinf_algos.lm.agents.episode_metrics`)."""
    import numpy as np
    import torch

    from rlinf_algos.lm.agents import EpisodeBatch, episode_metrics, make_agent
    from rlinf_algos.lm.engines import make_rollout
    from rlinf_algos.lm.folder import context_length
    from rlinf_algos.lm.reward import Verifier
    from rlinf_algos.lm.tasks import make_task, task_tokenizer

    temp = (0.0 if samples == 1 else run.algorithm.temperature) if temperature is None else temperature
    torch.manual_seed(seed)
    tok = task_tokenizer(run)
    task = make_task(run, tok)
    problems = task.heldout()
    if not problems:
        raise RlinfError(
            "the run has no held-out set (no data.val_files); give a prompt file with --data FILE"
        )
    rollout = make_rollout(run, seed=seed, pad_id=tok.pad_id)
    agent = make_agent(task, tok, task.max_new_tokens(), run.task.max_calls, context_length(run.model))
    reward = Verifier(task)

    def gen(prompts: list[list[int]], n: int, stop: Any) -> list[list[int]]:
        return rollout.generate(prompts, n, stop, temperature=temp)

    rewards: list[float] = []
    correct: list[bool] = []
    formed: list[bool] = []
    played = EpisodeBatch()
    for i in range(0, len(problems), chunk):
        eps = agent.run(problems[i : i + chunk], samples, gen)
        r = reward.compute({"response_ids": eps.final_responses, "answers": eps.answers})
        rewards += [float(x) for x in r["rewards"]]
        correct += [bool(c) for c in r["correct"]]
        formed += [bool(w) for w in r["well_formed"]]
        played.metrics += eps.metrics
    by_source: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(problems):
        by_source[_source_of(task, p)].append(i)

    def figures(idx: list[int]) -> dict[str, Any]:
        resp = [i * samples + j for i in idx for j in range(samples)]
        out = {
            "problems": len(idx),
            "score": float(np.mean([rewards[k] for k in resp])),
            "accuracy": float(np.mean([correct[k] for k in resp])),
            "pass_at_k": float(np.mean([any(correct[i * samples + j] for j in range(samples)) for i in idx])),
            "well_formed": float(np.mean([formed[k] for k in resp])),
        }
        if played.metrics:
            sub = EpisodeBatch(metrics=[played.metrics[k] for k in resp])
            out["tools"] = episode_metrics(sub, [correct[k] for k in resp])
        return out

    return {
        "samples": samples,
        "k": samples,
        "temperature": temp,
        "seed": seed,
        **figures(list(range(len(problems)))),
        "per_data_source": {src: figures(idx) for src, idx in sorted(by_source.items())},
    }


def _source_of(task: Any, problem: Any) -> str:
    """A problem's ``data_source`` column (``arith`` for the arithmetic task, ``unknown`` when a
    row has none)."""
    sample = getattr(task, "sample", None)
    if sample is None:
        return "arith"
    value = sample(problem).columns.get("data_source")
    return str(value) if value is not None else "unknown"


def tool_use(t: dict[str, Any]) -> str:
    """A tools run's episode figures (:func:`~rlinf_algos.lm.agents.episode_metrics`) in one
    phrase: success, turns and calls per episode, calls per tool, errors, timeouts, malformed
    and unknown calls (totals), answer rate; a lead's, its subagents' calls, turns, tool calls,
    tool errors and answer rate."""
    per_tool = ", ".join(
        f"{k.split('/', 1)[1]} {v:.2f}" for k, v in sorted(t.items()) if k.startswith("tool_calls/")
    )
    subagents = (
        f"; {t['subagent_calls']:.2f} subagent calls per episode ({t['subagent_turns']:.2f} turns and "
        f"{t['subagent_tool_calls']:.2f} tool calls each, {int(t['subagent_tool_errors'])} tool errors, answer "
        f"rate {t['subagent_answer_rate']:.3f})"
        if "subagent_calls" in t
        else ""
    )
    return (
        f"success {t.get('success', 0.0):.3f}, {t['turns']:.2f} turns and {t['tool_calls']:.2f} tool calls "
        f"per episode ({per_tool or 'none'}), {int(t['tool_errors'])} errors, {int(t['tool_timeouts'])} "
        f"timeouts, {int(t['tool_malformed'])} malformed, {int(t['tool_unknown'])} unknown, answer rate "
        f"{t['answer_rate']:.3f}{subagents}"
    )


def lm_eval_lines(run_dir: Path, data: Path | None, samples: int, seed: int, as_json: bool) -> list[str]:
    """What ``rlinf eval RUN_DIR`` prints for a language-model run: one JSON line with
    ``--json``, else the overall figures and one line per ``data_source``."""
    import json

    res = evaluate_lm_run(run_dir, data=data, samples=samples, seed=seed)
    if as_json:
        return [json.dumps(res)]

    def figures(r: dict[str, Any]) -> str:
        out = f"score {r['score']:.3f}, accuracy {r['accuracy']:.3f}, pass@{samples} {r['pass_at_k']:.3f}"
        return out + (f"; {tool_use(r['tools'])}" if "tools" in r else "")

    lines = [
        f"{res['problems']} prompts of {res['data']}, {samples} response(s) each (temperature "
        f"{res['temperature']:g}, seed {seed}): {figures(res)}"
    ]
    lines += [f"  {src} ({r['problems']}): {figures(r)}" for src, r in res["per_data_source"].items()]
    return lines
