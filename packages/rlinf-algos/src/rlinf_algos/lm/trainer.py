"""The in-process GRPO loop over the four components, and held-out evaluation.

:func:`train_lm` runs, in one process and in order: the supervised warm start, an evaluation of
the warm-started policy on the held-out set, ``algorithm.iterations`` GRPO iterations, and a
final evaluation. One iteration is the macro flow a distributed runner spreads over workers::

    problems --agent + RolloutWorker.generate--> episodes (token sequences)     "generate"
    final responses --RewardWorker.compute--> rewards                          "reward"
    sequences --ReferenceWorker.compute_log_probs--> ref log-probs             "reference"
    batch --ActorWorker.update--> new weights --RolloutWorker.set_weights      "update", "sync"

The run directory gets ``metrics.jsonl`` and ``metrics.csv`` (one row per iteration, with the
seconds of each phase), ``warm_start.pt`` and ``policy.pt`` (atomic), ``checkpoints/`` when
``runner.checkpoint_interval`` is set, ``eval_before.json``/``eval_after.json`` (per-problem
outcomes) and ``summary.json`` (``accuracy_before``, ``accuracy_after``, timings).
"""

from __future__ import annotations

import csv
import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from rlinf_algos.lm.agents import HierarchicalAgent, SingleAgent, make_agent
from rlinf_algos.lm.config import LMRunConfig
from rlinf_algos.lm.model import TinyLM, load_policy, save_policy
from rlinf_algos.lm.reward import RewardWorker
from rlinf_algos.lm.sft import warm_start
from rlinf_algos.lm.task import (
    Problem,
    ProblemSampler,
    chain_text,
    heldout_problems,
    lead_calls_text,
    prompt_text,
    step_width,
)
from rlinf_algos.lm.tokenizer import CharTokenizer
from rlinf_algos.lm.workers import ActorWorker, ReferenceWorker, RolloutWorker, pack_batch
from rlinf_core.errors import RlinfError
from rlinf_core.io import atomic_write_text

__all__ = ["ascii_curve", "evaluate", "max_response_tokens", "train_lm"]

PHASES = ("generate", "reward", "reference", "update", "sync")


def max_response_tokens(run: LMRunConfig, tokenizer: CharTokenizer) -> int:
    """``algorithm.max_new_tokens``, or when null the longest reference turn of the task family
    plus 8 tokens of slack."""
    if run.algorithm.max_new_tokens is not None:
        return run.algorithm.max_new_tokens
    t = run.task
    width = step_width(t)
    big = 10**t.max_digits - 1
    group = tuple([big] * max(t.num_terms))
    if t.mode == "single":
        longest = len(tokenizer.encode(chain_text(group, width)))
    else:
        p = Problem(tuple(group for _ in range(t.num_groups)))
        if t.mode == "flat":
            longest = len(tokenizer.encode(chain_text(p.terms, width)))
        else:
            sums = [sum(g) for g in p.groups]
            longest = max(
                len(tokenizer.encode(lead_calls_text(p))),
                len(tokenizer.encode(chain_text(group, width))),
                len(tokenizer.encode(chain_text(sums, width))),
            )
    return longest + 8


def evaluate(
    agent: SingleAgent | HierarchicalAgent,
    rollout: RolloutWorker,
    reward: RewardWorker,
    problems: Sequence[Problem],
    temperature: float = 0.0,
    chunk: int = 256,
) -> dict[str, Any]:
    """Exact-match accuracy of the rollout worker's policy on ``problems`` (one episode each,
    greedy at ``temperature=0``). Returns ``accuracy``, ``well_formed`` (fractions) and
    per-problem ``outcomes``."""

    def gen(prompts: list[list[int]], n: int, stop: Sequence[int]) -> list[list[int]]:
        return rollout.generate(prompts, n, stop, temperature=temperature)

    correct: list[bool] = []
    formed: list[bool] = []
    for i in range(0, len(problems), chunk):
        eps = agent.run(problems[i : i + chunk], 1, gen)
        r = reward.compute({"response_ids": eps.final_responses, "answers": eps.answers})
        correct += [bool(c) for c in r["correct"]]
        formed += [bool(w) for w in r["well_formed"]]
    n = max(len(problems), 1)
    return {
        "accuracy": sum(correct) / n,
        "well_formed": sum(formed) / n,
        "outcomes": [
            {"prompt": prompt_text(p), "answer": p.answer, "correct": c}
            for p, c in zip(problems, correct, strict=True)
        ],
    }


def ascii_curve(
    values: Sequence[float], width: int = 60, height: int = 8, lo: float = 0.0, hi: float = 1.0
) -> str:
    """A small text plot of ``values`` (resampled to ``width`` columns) between ``lo`` and ``hi``."""
    if not values:
        return "(no data)"
    cols = [
        values[min(len(values) - 1, int(i * len(values) / width))] for i in range(min(width, len(values)))
    ]
    rows = []
    for h in range(height, 0, -1):
        level = lo + (hi - lo) * (h - 0.5) / height
        label = f"{lo + (hi - lo) * h / height:5.2f} |"
        rows.append(label + "".join("#" if v >= level else " " for v in cols))
    rows.append("      +" + "-" * len(cols))
    return "\n".join(rows)


def _write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2))


def train_lm(
    run: LMRunConfig, run_dir: str | Path, log: Callable[[str], None] | None = print
) -> dict[str, Any]:
    """Warm start, evaluate, GRPO, evaluate; write the run directory; return the summary."""
    say = log or (lambda _msg: None)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    alg, task, rcfg = run.algorithm, run.task, run.runner
    torch.set_num_threads(rcfg.torch_threads)
    torch.manual_seed(rcfg.seed)
    random.seed(rcfg.seed)
    t_start = time.perf_counter()
    cpu_start = time.process_time()

    tok = CharTokenizer()
    width = step_width(task)
    heldout = heldout_problems(task)
    sampler = ProblemSampler(task, seed=rcfg.seed + 1, exclude=heldout)
    max_new = max_response_tokens(run, tok)

    if run.sft.init_checkpoint:
        model, tok_loaded, _ = load_policy(run.sft.init_checkpoint)
        if tok_loaded.to_dict() != tok.to_dict():
            raise RlinfError(
                f"sft.init_checkpoint {run.sft.init_checkpoint}: its tokenizer is not this task's"
            )
    else:
        model = TinyLM(run.model, tok.vocab_size)
    say(
        f"task {task.mode}: {model.num_parameters():,} parameters, step width {width}, "
        f"max {max_new} new tokens per turn, held-out set of {len(heldout)}"
    )
    rollout = RolloutWorker(
        run.model, tok.vocab_size, alg.temperature, alg.top_p, seed=rcfg.seed, pad_id=tok.pad_id
    )
    reward = RewardWorker(tok, task.format_reward)
    agent = make_agent(task.mode, tok, max_new, task.max_calls, run.model.max_seq_len)
    validation = ProblemSampler(task, seed=rcfg.seed + 2, exclude=heldout).sample(run.sft.check_size)

    def check(m: TinyLM) -> float:
        rollout.set_weights(m.state_dict(), -1)
        return evaluate(agent, rollout, reward, validation, 0.0)["accuracy"]

    sft_stats = warm_start(model, tok, task.mode, width, run.sft, sampler, log=say, check=check)
    save_policy(run_dir / "warm_start.pt", model, tok, {"sft": sft_stats})

    actor = ActorWorker(model, alg, seed=rcfg.seed)
    weights, version = actor.get_weights()
    rollout.set_weights(weights, version)
    reference = (
        ReferenceWorker(run.model, tok.vocab_size, weights, temperature=alg.temperature)
        if alg.kl_coef > 0
        else None
    )
    t_eval = time.perf_counter()
    before = evaluate(agent, rollout, reward, heldout, rcfg.eval_temperature)
    eval_s = time.perf_counter() - t_eval
    _write_json(run_dir / "eval_before.json", before)
    say(
        f"held-out accuracy after the warm start: {before['accuracy']:.3f} (well-formed {before['well_formed']:.3f})"
    )
    evals = [{"iteration": 0, "accuracy": before["accuracy"]}]

    rows: list[dict[str, Any]] = []
    jsonl = (run_dir / "metrics.jsonl").open("w", encoding="utf-8")
    t_grpo = time.perf_counter()
    stopped_early = False
    try:
        for it in range(1, alg.iterations + 1):
            if rcfg.time_limit_s is not None and time.perf_counter() - t_start > rcfg.time_limit_s:
                stopped_early = True
                say(f"runner.time_limit_s={rcfg.time_limit_s} reached; stopping after {it - 1} iterations")
                break
            phase: dict[str, float] = {}
            t = time.perf_counter()
            problems = sampler.sample(alg.prompts_per_iter)
            gen_tokens0 = rollout.tokens
            eps = agent.run(problems, alg.group_size, rollout.generate)
            phase["generate"] = time.perf_counter() - t

            t = time.perf_counter()
            r = reward.compute({"response_ids": eps.final_responses, "answers": eps.answers})
            phase["reward"] = time.perf_counter() - t

            batch = pack_batch(eps.sequences, eps.loss_masks, tok.pad_id)
            batch["episode_index"] = torch.tensor(eps.episode_index, dtype=torch.long)
            batch["rewards"] = torch.from_numpy(r["rewards"])
            t = time.perf_counter()
            if reference is not None:
                batch.update(reference.compute_log_probs(batch))
            phase["reference"] = time.perf_counter() - t

            t = time.perf_counter()
            st = actor.update(batch)
            phase["update"] = time.perf_counter() - t

            t = time.perf_counter()
            weights, version = actor.get_weights()
            rollout.set_weights(weights, version)
            phase["sync"] = time.perf_counter() - t

            gen_tokens = rollout.tokens - gen_tokens0
            row: dict[str, Any] = {
                "iteration": it,
                "wall_s": round(time.perf_counter() - t_start, 3),
                "reward_mean": float(r["rewards"].mean()),
                "train_accuracy": float(r["correct"].mean()),
                "well_formed": float(r["well_formed"].mean()),
                "sequences": len(eps.sequences),
                "generated_tokens": gen_tokens,
                "tokens_per_s": gen_tokens / max(phase["generate"], 1e-9),
                **{k: round(v, 6) for k, v in st.items()},
                **{f"{k}_s": round(phase[k], 4) for k in PHASES},
            }
            if rcfg.eval_interval and it % rcfg.eval_interval == 0 and it != alg.iterations:
                acc = evaluate(agent, rollout, reward, heldout, rcfg.eval_temperature)["accuracy"]
                row["heldout_accuracy"] = acc
                evals.append({"iteration": it, "accuracy": acc})
            rows.append(row)
            jsonl.write(json.dumps(row) + "\n")
            jsonl.flush()
            if it % rcfg.log_interval == 0:
                extra = f"  held-out {row['heldout_accuracy']:.3f}" if "heldout_accuracy" in row else ""
                say(
                    f"iter {it:4d}  reward {row['reward_mean']:.3f}  train acc {row['train_accuracy']:.3f}  "
                    f"kl {st['kl']:.4f}  gen {phase['generate']:.2f}s ({row['tokens_per_s']:.0f} tok/s)  "
                    f"update {phase['update']:.2f}s  [{row['wall_s']:.0f}s]{extra}"
                )
            if rcfg.checkpoint_interval and it % rcfg.checkpoint_interval == 0:
                save_policy(run_dir / "checkpoints" / f"iter_{it}.pt", actor.model, tok, {"iteration": it})
    finally:
        jsonl.close()
    grpo_s = time.perf_counter() - t_grpo
    if rows:
        with (run_dir / "metrics.csv").open("w", newline="", encoding="utf-8") as f:
            keys = list(dict.fromkeys(k for row in rows for k in row))
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)

    after = evaluate(agent, rollout, reward, heldout, rcfg.eval_temperature)
    _write_json(run_dir / "eval_after.json", after)
    evals.append({"iteration": len(rows), "accuracy": after["accuracy"]})
    save_policy(run_dir / "policy.pt", actor.model, tok, {"iterations": len(rows)})
    total_s = time.perf_counter() - t_start
    n = max(len(rows), 1)
    summary = {
        "mode": task.mode,
        "parameters": model.num_parameters(),
        "accuracy_before": before["accuracy"],
        "accuracy_after": after["accuracy"],
        "accuracy_gain_pp": 100.0 * (after["accuracy"] - before["accuracy"]),
        "well_formed_before": before["well_formed"],
        "well_formed_after": after["well_formed"],
        "eval_size": len(heldout),
        "eval_temperature": rcfg.eval_temperature,
        "iterations": len(rows),
        "stopped_early": stopped_early,
        "sft_steps": sft_stats["steps"],
        "sft_check_accuracy": sft_stats["check_accuracy"],
        "sft_s": round(sft_stats["seconds"], 2),
        "eval_s": round(eval_s, 2),
        "grpo_s": round(grpo_s, 2),
        "total_s": round(total_s, 2),
        "cpu_s": round(time.process_time() - cpu_start, 2),
        "tokens_per_s": sum(r["generated_tokens"] for r in rows)
        / max(sum(r["generate_s"] for r in rows), 1e-9),
        "phase_s_mean": {k: sum(r[f"{k}_s"] for r in rows) / n for k in PHASES},
        "evals": evals,
    }
    _write_json(run_dir / "summary.json", summary)
    say("train accuracy per iteration:\n" + ascii_curve([r["train_accuracy"] for r in rows]))
    say(
        f"held-out exact-match accuracy: before {before['accuracy']:.3f} -> after {after['accuracy']:.3f} "
        f"({summary['accuracy_gain_pp']:+.1f} pp) in {total_s:.0f}s ({len(rows)} iterations)"
    )
    return summary
