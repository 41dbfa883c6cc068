"""A tool-calling search agent trained with GRPO: rlinf (``grpo_lm`` with a ``tools`` section,
``runner.scheduler: local``) beside TRL's ``GRPOTrainer(tools=[search])`` on the same warm-started
model folder, questions, ``search`` tool, exact-match reward and settings, in one run.

What one run does:

1. writes the search example's data (``rlinf_algos.lm.agentic.multihop.write_dataset``, world
   seed 0, as ``examples/search_agent/make_data.py`` does): a corpus about made-up companies,
   people and cities, two-hop questions ("Where was the founder of X born?") that need two
   searches, a careless teacher's tool-calling traces;
2. warm-starts ONE model folder with ``examples/search_agent/sft.yaml`` (``rlinf sft`` in
   process, ``--sft-steps`` of it): both sides start from it;
3. runs, for every seed, each side in its own subprocess with ``OMP_NUM_THREADS=1`` and one torch
   thread, for the same number of iterations, with grpo.yaml's episode settings: prompts per
   step x group size (``num_generations``), learning rate (constant), no KL (``beta=0``),
   temperature 1.0, clip 0.2/0.28, token-mean loss, group-std scaled advantages, one optimiser
   step per batch (the shared settings of ``grpo_lm_vs_trl.py``: ``rlinf_algorithm`` /
   ``trl_args``);
4. the tool is the same on both sides: rlinf's built-in ``search`` (``rlinf_algos.tools.search``,
   BM25 over ``corpus.jsonl``, top 3 passages); TRL gets it as a plain function
   ``search(query: str) -> str`` with the same docstring (so the same JSON schema) calling the
   same index; the reward is the same ``ExactMatchReward`` (``answer is (.+)``, SQuAD
   normalisation: ``multihop.answer_matches``) on the last assistant turn;
5. evaluates the policy every ``eval_every`` iterations on held-out questions about companies no
   training question names, with ONE evaluator for both sides: the model saved to a folder and
   played greedily through rlinf's tool loop (``rlinf_algos.lm.evaluate.evaluate_policy``, as
   ``examples/search_agent/evaluate.py`` does), success = exact match; its seconds are left out
   of the training clock;
6. prints and records samples/s (episodes per second of training), tool calls/s, sampled
   tokens/s, and held-out success at equal wall time (each side's success at the shorter side's
   training time, linear between evaluations) per seed, with medians over seeds.

Where the sides cannot be made identical (also in the JSON's ``notes``):

- Token budget. rlinf caps each turn at ``max_new_tokens`` (48) and the whole response (sampled
  plus inserted ids) at ``max_response_tokens`` (360). TRL has one budget,
  ``max_completion_length`` (360 here), for the whole completion, tool results included, and no
  per-turn cap: a turn may run to what is left of the 360.
- Turns. rlinf: ``max_turns`` (4) policy turns. TRL: ``max_tool_calling_iterations`` = 3 rounds of
  tool calls after the first turn, so at most 4 policy turns as well; an episode whose last turn
  still calls a tool scores 0 on both sides.
- Tool-call parsing. rlinf parses ``<tool_call>{json}</tool_call>`` blocks itself
  (``rlinf_algos.lm.agentic.calls``); TRL parses with the tokenizer's ``response_template``. The
  model folder's chat template is rlinf's ChatML with Qwen2.5's tool format, which TRL does not
  recognise by name (``add_response_schema`` matches templates by their text), so the benchmark
  sets TRL's own Qwen parser (``trl.chat_template_utils.qwen3_template``) on the tokenizer; a
  call the parser rejects is plain text (an answer) for TRL, and a malformed-call error message
  returned to the model for rlinf, whose episode goes on (and whose ``tool_calls`` count it). A
  weakly warm-started policy writes many broken calls (of 24 first turns of the 120-step warm
  start sampled at temperature 1, rlinf's parser found a call block in 24, TRL's a valid call in
  20, the other 4 being invalid JSON), so TRL's episodes end sooner and it runs fewer tools.
- Token in, token out: both train on the sampled ids with the inserted tool-result ids masked
  out; rlinf appends the template's insertion ids to the sampled ids, TRL does the same from
  its ``_get_tool_suffix_ids``.

Usage::

    uv run --group bench python benchmarks/agent_vs_trl.py             # 3 seeds (see --help)
    uv run --group bench python benchmarks/agent_vs_trl.py --quick     # one iteration each side
    uv run --group bench python benchmarks/agent_vs_trl.py --keep DIR --reuse-warm-start
"""

from __future__ import annotations

import inspect
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from grpo_lm_vs_trl import (  # noqa: E402
    bench_args,
    machine,
    read_jsonl,
    rlinf_algorithm,
    run_child,
    score_at,
    spread,
    trl_args,
    watch_rlinf,
    watch_trl,
)

DEFAULT_JSON = HERE / "results" / "agent_vs_trl.json"
EXAMPLE = HERE.parent / "examples" / "search_agent"
SIDES = ("rlinf", "trl")


# -- settings --------------------------------------------------------------------------------------


def settings(quick: bool) -> dict[str, Any]:
    """What both sides share: grpo.yaml's episode and GRPO settings, sft.yaml's model and warm
    start; fewer iterations and held-out questions than the example, to fit 3 seeds x 2 sides
    in about 30 minutes on a loaded 2-core machine."""
    import yaml

    sft = yaml.safe_load((EXAMPLE / "sft.yaml").read_text(encoding="utf-8"))
    grpo = yaml.safe_load((EXAMPLE / "grpo.yaml").read_text(encoding="utf-8"))
    alg = grpo["algorithm"]
    (tool,) = grpo["tools"]
    s = {
        "world_seed": 0,
        "slip": 0.5,
        "top_k": int(tool["kwargs"]["top_k"]),
        "model": dict(sft["model"]["init"]),
        "sft": {k: sft["train"][k] for k in ("steps", "batch_size", "lr", "warmup_steps", "min_lr_ratio")},
        "group_size": alg["group_size"],
        "prompts_per_iter": 4,  # grpo.yaml: 8
        "max_new_tokens": alg["max_new_tokens"],
        "max_turns": alg["max_turns"],
        "max_response_tokens": alg["max_response_tokens"],
        "lr": alg["lr"],
        "iterations": 6,
        "rlinf_iterations": 6,
        "eval_every": 3,
        "val_rows": 32,
        "seeds": [0, 1, 2],
    }
    if quick:
        s.update(group_size=4, prompts_per_iter=2, iterations=1, rlinf_iterations=1, eval_every=1)
        s.update(val_rows=4, seeds=[0])
        s["sft"] = {**s["sft"], "steps": 4, "batch_size": 8}
    return s


# -- data, tool and reward -------------------------------------------------------------------------


def write_data(root: Path, cfg: dict[str, Any]) -> dict[str, str]:
    """The example's files under ``root/data`` (``make_data.py``'s), the held-out questions and
    traces cut to ``val_rows`` (``val_eval.jsonl``, ``sft_val_eval.jsonl``), and a TRL dataset
    without the nested columns."""
    from rlinf_algos.lm.agentic.multihop import write_dataset

    data = root / "data"
    write_dataset(data, seed=cfg["world_seed"], slip=cfg["slip"], top_k=cfg["top_k"])
    for src, dst in (("val", "val_eval"), ("sft_val", "sft_val_eval")):
        rows = read_jsonl(str(data / f"{src}.jsonl"))[: cfg["val_rows"]]
        (data / f"{dst}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    trl_rows = [{"prompt": r["prompt"], "answer": r["answer"]} for r in read_jsonl(str(data / "train.jsonl"))]
    (data / "train_trl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in trl_rows), encoding="utf-8")
    return {
        name: str(data / f"{name}.jsonl")
        for name in ("corpus", "train", "val_eval", "train_trl", "sft_train", "sft_val_eval")
    }


def search_tool(corpus: str, top_k: int) -> Any:
    """rlinf's built-in ``search`` as a plain function TRL can call: the same BM25 index, top-k and
    formatting, and the same docstring (so the same JSON schema in the prompt)."""
    from rlinf_algos.tools.search import Search

    tool = Search(corpus, top_k=top_k)

    # no return annotation: transformers' get_json_schema would add a "return" entry to the
    # schema that rlinf's (function_schema) does not have, and the prompts would differ
    def search(query: str):
        return tool.search(query)

    search.__doc__ = inspect.getdoc(Search.search)
    return search


def exact_match_reward(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """TRL's reward: 1 when the last assistant turn's ``answer is X`` matches (the example's
    ``exact_match`` reward, ``multihop.answer_matches``), else 0."""
    from rlinf_algos.lm.agentic.multihop import answer_matches

    def last(c: Any) -> str:
        if isinstance(c, str):
            return c
        turns = [m for m in c if m.get("role") == "assistant"]
        return str(turns[-1].get("content") or "") if turns else ""

    return [1.0 if answer_matches(last(c), a) else 0.0 for c, a in zip(completions, answer, strict=True)]


def rlinf_sections(spec: dict[str, Any], model_path: str) -> dict[str, Any]:
    """The run's sections for rlinf (grpo.yaml's shape with the shared settings)."""
    from rlinf_algos.lm.agentic.multihop import ANSWER_PATTERN

    cfg, files = spec["settings"], spec["files"]
    alg = rlinf_algorithm(cfg, cfg["lr"])
    alg.update(max_turns=cfg["max_turns"], max_response_tokens=cfg["max_response_tokens"])
    return {
        "algorithm": alg,
        "model": {"path": model_path, "dtype": "float32"},
        "data": {"train_files": [files["train"]], "val_files": [files["val_eval"]], "seed": spec["seed"]},
        "reward": {"name": "exact_match", "kwargs": {"pattern": ANSWER_PATTERN, "normalize": True}},
        "tools": [{"name": "search", "kwargs": {"corpus": files["corpus"], "top_k": cfg["top_k"]}}],
        "runner": {
            "scheduler": "local",
            "seed": spec["seed"],
            "torch_threads": 1,
            "eval_interval": 0,
            "log_interval": 10_000,
        },
    }


class AgentEvaluator:
    """Held-out success of a model, the same for both sides: the model saved to a folder (with
    the warm start's tokenizer) and played greedily through rlinf's tool loop
    (``evaluate_policy``). Returns ``score`` (success), ``exact`` and the tool use."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from rlinf_algos.lm.config import load_lm_sections

        self.dir = Path(spec["run_dir"]) / "eval_policy"
        shutil.copytree(spec["folder"], self.dir, dirs_exist_ok=True)
        self.run = load_lm_sections(rlinf_sections(spec, str(self.dir)))
        self.seconds = 0.0

    def __call__(self, model: Any) -> dict[str, float]:
        from rlinf_algos.lm.evaluate import evaluate_policy

        t = time.perf_counter()
        model.save_pretrained(self.dir)
        res = evaluate_policy(self.run, seed=10_000)
        self.seconds += time.perf_counter() - t
        tools = res.get("tools", {})
        return {
            "score": res["accuracy"],
            "exact": res["accuracy"],
            "tool_calls": tools.get("tool_calls", 0.0),
            "turns": tools.get("turns", 0.0),
            "answer_rate": tools.get("answer_rate", 0.0),
        }


# -- the children ----------------------------------------------------------------------------------


def child_sft(spec: dict[str, Any]) -> dict[str, Any]:
    """The warm start: ``examples/search_agent/sft.yaml`` on this run's traces."""
    import torch
    import yaml

    torch.set_num_threads(int(spec.get("threads", 1)))
    from rlinf_algos.lm.finetune import load_sft_config, train_sft

    cfg, files = spec["settings"], spec["files"]
    sections = yaml.safe_load((EXAMPLE / "sft.yaml").read_text(encoding="utf-8"))
    sections["data"].update(train_files=[files["sft_train"]], val_files=[files["sft_val_eval"]])
    sections["tools"] = [{"name": "search", "kwargs": {"corpus": files["corpus"], "top_k": cfg["top_k"]}}]
    sections["train"].update(cfg["sft"], eval_generate=min(64, cfg["val_rows"]))
    sections["runner"].update(torch_threads=int(spec.get("threads", 1)))
    res = train_sft(
        load_sft_config(sections), spec["run_dir"], log=lambda m: print(f"  [sft] {m}", flush=True)
    )
    return {"policy": str(Path(spec["run_dir"]) / "policy"), "summary": res.summary}


def child_rlinf(spec: dict[str, Any], t_process: float) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from rlinf_algos.lm.config import load_lm_sections

    run = load_lm_sections(rlinf_sections(spec, spec["folder"]))
    return watch_rlinf(run, spec, AgentEvaluator(spec), t_process)


def child_trl(spec: dict[str, Any], t_process: float) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging
    from trl import GRPOTrainer
    from trl.chat_template_utils import qwen3_template

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    cfg, seed = spec["settings"], spec["seed"]
    torch.manual_seed(seed)
    dataset = Dataset.from_list(read_jsonl(spec["files"]["train_trl"]))
    model = AutoModelForCausalLM.from_pretrained(spec["folder"], dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(spec["folder"])
    # the folder's template writes Qwen2.5's <tool_call> JSON; TRL's parser for it
    tok.response_template = qwen3_template
    search = search_tool(spec["files"]["corpus"], cfg["top_k"])
    args = trl_args(
        {**cfg, "max_new_tokens": cfg["max_response_tokens"]},  # one budget for all turns
        cfg["lr"],
        spec["run_dir"],
        seed,
        max_tool_calling_iterations=cfg["max_turns"] - 1,
    )

    def make_trainer(callbacks: list[Any]) -> Any:
        return GRPOTrainer(
            model=model,
            reward_funcs=exact_match_reward,
            args=args,
            train_dataset=dataset,
            processing_class=tok,
            tools=[search],
            callbacks=callbacks,
        )

    res = watch_trl(make_trainer, spec, AgentEvaluator(spec), t_process)
    res["same_prompt_ids"] = same_prompts(spec, tok, search)
    return res


def same_prompts(spec: dict[str, Any], tok: Any, search: Any, rows: int = 4) -> bool:
    """Whether TRL's rendering of the first training prompts with ``tools=[search]`` is, token
    for token, what rlinf's tool task feeds the policy (its ``ChatFormat`` with the schemas of
    the ``tools`` section)."""
    from rlinf_algos.lm.agentic import ChatFormat
    from rlinf_algos.tools import load_run_tools

    fmt = ChatFormat(tok, load_run_tools(rlinf_sections(spec, spec["folder"])["tools"]).schemas)
    for r in read_jsonl(spec["files"]["train"])[:rows]:
        trl_ids = tok.apply_chat_template(
            r["prompt"], tools=[search], add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
        if list(trl_ids) != list(fmt.prompt_ids(r["prompt"])):
            return False
    return True


def child_main(argv: list[str]) -> None:
    t_process = time.perf_counter()
    spec = json.loads(Path(argv[0]).read_text())
    kind = spec["kind"]
    res = {"sft": lambda: child_sft(spec), "rlinf": lambda: child_rlinf(spec, t_process)}.get(
        kind, lambda: child_trl(spec, t_process)
    )()
    Path(argv[1]).write_text(json.dumps(res, default=str))


# -- figures ---------------------------------------------------------------------------------------


def run_figures(res: dict[str, Any]) -> dict[str, Any]:
    iters = res["iters"]
    train_s = iters[-1]["train_s"]
    samples = sum(r["samples"] for r in iters)
    return {
        "iterations": len(iters),
        "train_s": train_s,
        "samples_per_s": samples / train_s,
        "tool_calls_per_s": sum(r.get("tool_calls", 0) for r in iters) / train_s,
        "tool_calls_per_episode": sum(r.get("tool_calls", 0) for r in iters) / max(samples, 1),
        "sampled_tokens_per_s": sum(r["generated_tokens"] for r in iters) / train_s,
        "s_per_iter": statistics.median(r["iter_s"] for r in iters),
        "generate_s_per_iter": sum(r["generate_s"] for r in iters) / len(iters),
        "update_s_per_iter": sum(r["update_s"] for r in iters) / len(iters),
        "success_start": res["evals"][0]["score"],
        "success_end": res["evals"][-1]["score"],
        "eval_tool_calls_end": res["evals"][-1].get("tool_calls", 0.0),
        "startup_s": res["startup_s"],
    }


def summarise(runs: dict[tuple[str, int], dict[str, Any]], seeds: list[int]) -> dict[str, Any]:
    per_seed, rows = [], []
    figs = {k: run_figures(v) for k, v in runs.items()}
    for s in seeds:
        t_eq = min(figs[(side, s)]["train_s"] for side in SIDES)
        for side in SIDES:
            f = figs[(side, s)]
            f["t_equal"] = t_eq
            f["success_equal"] = score_at(runs[(side, s)]["evals"], t_eq)
            f["gain_equal"] = f["success_equal"] - f["success_start"]
            per_seed.append(
                {
                    "side": side,
                    "seed": s,
                    **{k: round(v, 4) for k, v in f.items()},
                    "curve": [
                        [e["iteration"], round(e["train_s"], 2), round(e["score"], 4)]
                        for e in runs[(side, s)]["evals"]
                    ],
                }
            )
    for side in SIDES:
        col = {k: [figs[(side, s)][k] for s in seeds] for k in figs[(side, seeds[0])]}
        ratio = [figs[(side, s)]["samples_per_s"] / figs[("trl", s)]["samples_per_s"] for s in seeds]
        rows.append(
            {
                "side": side,
                "samples/s": round(statistics.median(col["samples_per_s"]), 2),
                "samples/s range": spread(col["samples_per_s"], 2),
                "x TRL samples/s": round(statistics.median(ratio), 2),
                "tool calls/s": round(statistics.median(col["tool_calls_per_s"]), 2),
                "tool calls/episode": round(statistics.median(col["tool_calls_per_episode"]), 2),
                "sampled tokens/s": round(statistics.median(col["sampled_tokens_per_s"]), 0),
                "s/iter": round(statistics.median(col["s_per_iter"]), 2),
                "generate s/iter": round(statistics.median(col["generate_s_per_iter"]), 2),
                "update s/iter": round(statistics.median(col["update_s_per_iter"]), 2),
                "iterations": int(statistics.median(col["iterations"])),
                "success start": round(statistics.median(col["success_start"]), 3),
                "equal wall s": round(statistics.median(col["t_equal"]), 1),
                "success at equal wall": round(statistics.median(col["success_equal"]), 3),
                "success range": spread(col["success_equal"], 3),
                "gain at equal wall": round(statistics.median(col["gain_equal"]), 3),
                "success at end": round(statistics.median(col["success_end"]), 3),
            }
        )
    return {"rows": rows, "per_seed": per_seed}


def print_table(rows: list[dict[str, Any]], per_seed: list[dict[str, Any]]) -> None:
    cols = [
        ("side", "side", "{}"),
        ("seed", "seed", "{}"),
        ("samples/s", "samples_per_s", "{:.2f}"),
        ("calls/s", "tool_calls_per_s", "{:.2f}"),
        ("calls/ep", "tool_calls_per_episode", "{:.2f}"),
        ("tok/s", "sampled_tokens_per_s", "{:.0f}"),
        ("s/iter", "s_per_iter", "{:.2f}"),
        ("gen", "generate_s_per_iter", "{:.2f}"),
        ("upd", "update_s_per_iter", "{:.2f}"),
        ("iters", "iterations", "{}"),
        ("succ0", "success_start", "{:.3f}"),
        ("T_eq s", "t_equal", "{:.1f}"),
        ("succ@T_eq", "success_equal", "{:.3f}"),
        ("succ end", "success_end", "{:.3f}"),
    ]
    med_keys = {
        "samples_per_s": "samples/s",
        "tool_calls_per_s": "tool calls/s",
        "tool_calls_per_episode": "tool calls/episode",
        "sampled_tokens_per_s": "sampled tokens/s",
        "s_per_iter": "s/iter",
        "generate_s_per_iter": "generate s/iter",
        "update_s_per_iter": "update s/iter",
        "iterations": "iterations",
        "success_start": "success start",
        "t_equal": "equal wall s",
        "success_equal": "success at equal wall",
        "success_end": "success at end",
    }
    lines = [{**r} for r in per_seed] + [
        {"seed": "median", "side": r["side"], **{k: r[m] for k, m in med_keys.items()}} for r in rows
    ]
    cells = [[h for h, _, _ in cols]] + [[fmt.format(r[k]) for _, k, fmt in cols] for r in lines]
    widths = [max(len(c[i]) for c in cells) for i in range(len(cols))]
    for i, line in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


NOTES = [
    "samples/s: episodes (completions) per second of training, evaluations excluded; tool calls/s: "
    "search calls run per second of training; sampled tokens/s: policy-sampled tokens (tool results "
    "and template insertions left out) per second of training.",
    "success: exact match on held-out questions (companies no training question names), greedy, "
    "played by ONE evaluator for both sides (the model saved and run through rlinf's tool loop, "
    "evaluate_policy); success at equal wall: at the shorter side's training time of that seed, "
    "linear between evaluations. Medians over seeds; ranges min-max.",
    "Token budget: rlinf caps each turn at max_new_tokens and all turns at max_response_tokens; TRL "
    "has only max_completion_length (= max_response_tokens here) over the whole completion, tool "
    "results included, and no per-turn cap.",
    "Turns: rlinf max_turns policy turns; TRL max_tool_calling_iterations = max_turns - 1 rounds of "
    "tool calls after the first turn (the same number of policy turns).",
    "Tool-call parsing: rlinf parses <tool_call> JSON itself; TRL parses with the tokenizer's "
    "response_template, set to TRL's own Qwen parser (trl.chat_template_utils.qwen3_template) because "
    "add_response_schema does not recognise the model folder's ChatML template by its text. "
    "same_prompt_ids (per TRL run) checks that both sides render the first prompts with the tool "
    "schema to the same ids.",
    "Malformed calls: rlinf answers a call block that is not valid JSON with an error message and "
    "counts it among its tool calls; TRL's parser turns it into plain text, which ends the episode. "
    "With a weak warm start this alone gives rlinf more calls and turns per episode.",
    "Greedy, the warm start answers no held-out question right (it takes the careless teacher's "
    "one-search shortcut); sampled at temperature 1 it searches twice about half the time, so groups "
    "differ in reward and both sides learn (success at start 0 on both). A warm start that never "
    "answers right even sampled would give zero advantages and compare nothing but throughput.",
    "Both sides keep groups with equal rewards (rlinf skip_uniform_groups: false), no KL, one "
    "optimiser step per batch, the shared settings of grpo_lm_vs_trl.py (rlinf_algorithm / trl_args).",
]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
        return
    ap = bench_args(__doc__.splitlines()[0], DEFAULT_JSON, "one seed, one iteration each side: a smoke")
    ap.add_argument("--eval-every", type=int, default=None, help="held-out evaluation every N iterations")
    ap.add_argument(
        "--sft-steps",
        type=int,
        default=None,
        help="warm-start steps (default sft.yaml's)",
    )
    ap.add_argument("--keep", type=Path, default=None, help="keep the data, model folders and run dirs here")
    ap.add_argument(
        "--reuse-warm-start",
        action="store_true",
        help="with --keep: reuse the warm start a previous run left",
    )
    args = ap.parse_args()
    try:
        import trl  # noqa: F401
    except ImportError:
        sys.exit("trl is not installed: run with `uv run --group bench python benchmarks/agent_vs_trl.py`")
    cfg = settings(args.quick)
    if args.seeds:
        cfg["seeds"] = [int(s) for s in args.seeds.split(",")]
    if args.iterations is not None:
        if args.iterations < 1:
            ap.error(f"--iterations must be at least 1, got {args.iterations}")
        cfg["iterations"] = cfg["rlinf_iterations"] = args.iterations
    if args.eval_every is not None:
        cfg["eval_every"] = max(1, args.eval_every)
    if args.sft_steps is not None:
        if args.sft_steps < 1:
            ap.error(f"--sft-steps must be at least 1, got {args.sft_steps}")
        cfg["sft"] = {**cfg["sft"], "steps": args.sft_steps}
    if args.reuse_warm_start and args.keep is None:
        ap.error("--reuse-warm-start needs --keep DIR (where the warm start is)")
    t_start, load_start = time.perf_counter(), os.getloadavg()
    tmp = None
    if args.keep is not None:
        work = args.keep
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="agent_vs_trl_")
        work = Path(tmp.name)
    me = Path(__file__).resolve()
    try:
        files = write_data(work, cfg)
        sft_out = work / "sft.out.json"
        t = time.perf_counter()
        if args.reuse_warm_start and sft_out.exists():
            sft = json.loads(sft_out.read_text())
            print(f"reusing the warm start in {work / 'sft'} (--reuse-warm-start)")
        else:
            print(f"warm start ({cfg['sft']['steps']} SFT steps)...", flush=True)
            spec = {
                "kind": "sft",
                "settings": cfg,
                "files": files,
                "run_dir": str(work / "sft"),
                "threads": 2,
            }
            sft = run_child(spec, work, "sft", timeout=3600, script=me)
            sft["seconds"] = time.perf_counter() - t
            sft_out.write_text(json.dumps(sft, default=str))
        ss = sft["summary"]
        print(
            f"warm start: {sft.get('seconds', 0):.0f}s, val loss {ss['val_loss_before']:.3f} -> "
            f"{ss['val_loss_after']:.3f}",
            flush=True,
        )
        runs: dict[tuple[str, int], dict[str, Any]] = {}
        for i, seed in enumerate(cfg["seeds"]):
            for side in SIDES if i % 2 == 0 else SIDES[::-1]:
                name = f"{side}_s{seed}"
                spec = {
                    "kind": side,
                    "seed": seed,
                    "settings": cfg,
                    "files": files,
                    "folder": sft["policy"],
                    "run_dir": str(work / name),
                }
                shutil.rmtree(work / name, ignore_errors=True)
                runs[(side, seed)] = res = run_child(spec, work, name, timeout=1800, script=me)
                f = run_figures(res)
                print(
                    f"{name:>9}: {f['samples_per_s']:.2f} samples/s  {f['tool_calls_per_s']:.2f} calls/s  "
                    f"{f['s_per_iter']:.2f} s/iter  success {f['success_start']:.3f} -> {f['success_end']:.3f} "
                    f"in {f['iterations']} iterations, {f['train_s']:.0f}s [process {res['process_s']:.0f}s]",
                    flush=True,
                )
        summary = summarise(runs, cfg["seeds"])
        print()
        print_table(summary["rows"], summary["per_seed"])
    finally:
        if tmp is not None:
            tmp.cleanup()
    wall, load_end = time.perf_counter() - t_start, os.getloadavg()
    print(
        f"\nload average at start {load_start[0]:.1f}, at end {load_end[0]:.1f} ({os.cpu_count()} CPUs); took {wall:.0f} s"
    )
    same = [runs[("trl", s)].get("same_prompt_ids") for s in cfg["seeds"]]
    if not all(same):
        print("WARNING: TRL's prompts with tools=[search] are not rlinf's ids (same_prompt_ids false)")
    if args.no_json:
        return
    path = args.json or DEFAULT_JSON
    # the command without this machine's paths (--keep's and --json's folders)
    argv = [a for a in sys.argv[1:] if a != "--reuse-warm-start"]
    argv = ["DIR" if i and argv[i - 1] in ("--keep", "--json") else a for i, a in enumerate(argv)]
    cmd = "uv run --group bench python benchmarks/agent_vs_trl.py" + (" " + shlex.join(argv) if argv else "")
    report = {
        "title": "Search agent GRPO: rlinf grpo_lm tools task beside TRL GRPOTrainer(tools=[search]), "
        "same warm start, questions, tool, reward and settings" + (" (--quick)" if args.quick else ""),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, load_end),
        "conditions": (
            f"Qwen2 d{cfg['model']['hidden_size']} x {cfg['model']['num_layers']} layers, BPE vocab "
            f"{cfg['model']['vocab_size']}, warm-started ({cfg['sft']['steps']} SFT steps of sft.yaml); "
            f"{cfg['prompts_per_iter']} questions x group {cfg['group_size']} episodes per iteration, "
            f"{cfg['iterations']} iterations, lr {cfg['lr']}, no KL, temperature 1; max_turns "
            f"{cfg['max_turns']}, {cfg['max_new_tokens']} tokens per turn (rlinf), "
            f"{cfg['max_response_tokens']} per episode; search top {cfg['top_k']}; held-out success on "
            f"{cfg['val_rows']} questions every {cfg['eval_every']} iterations (not timed); 2-core "
            "machine shared with other jobs"
        ),
        "command": cmd
        + (" (the warm start reused from an earlier identical run)" if args.reuse_warm_start else ""),
        "seeds": cfg["seeds"],
        "figures": summary["rows"],
        "source": "benchmarks/agent_vs_trl.py",
        "notes": NOTES,
        "same_prompt_ids": same,
        "settings": cfg,
        "warm_start": {k: ss.get(k) for k in ("val_loss_before", "val_loss_after", "steps")},
        "per_seed": summary["per_seed"],
        "wall_s": round(wall, 1),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = path.with_suffix(".json.tmp")
    tmp_path.write_text(json.dumps(report, indent=2) + "\n")
    tmp_path.replace(path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
