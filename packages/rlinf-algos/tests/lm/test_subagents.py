"""A lead agent whose tool is a subagent (issue 40, WideSeek-R1's shape): ``algorithm.subagents``
in a tools run of ``grpo_lm``. Token in and token out for the lead's and every subagent's
sequence against a scripted policy that plays the warm start's traces; the subagents' turns
batched across leads with no deadlock while every lead waits; a subagent hitting its
``max_turns``, malformed and surplus ``ask`` calls, a subagent calling a tool it does not have;
the lead's reward and group advantage shared by its subagents; the configuration's checks; and
``rlinf sft`` (per-row tool schemas) then one GRPO iteration through ``rlinf train`` and
``rlinf eval`` on a tiny generated world."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlinf_algos.lm.agentic.multihop import ANSWER_PATTERN, write_dataset
from rlinf_algos.lm.agentic.subagents import ask_schema
from rlinf_algos.lm.agentic.wideseek import sub_questions, write_wideseek
from rlinf_algos.lm.agents import ToolAgent, episode_metrics
from rlinf_algos.lm.config import load_lm_sections
from rlinf_algos.lm.tasks import make_task, task_tokenizer
from rlinf_algos.lm.tokens import chatml_text
from rlinf_core.errors import ConfigError

SIZES = {"companies": 24, "heldout_companies": 6, "cities": 16, "heldout_cities": 6, "countries": 4}


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def world_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wideseek")
    write_wideseek(out, seed=3, **SIZES)
    return out


def _search(world: Path) -> dict[str, Any]:
    return {"name": "search", "kwargs": {"corpus": str(world / "corpus.jsonl"), "top_k": 3}}


@pytest.fixture(scope="module")
def model_dir(world_dir: Path, tmp_path_factory: pytest.TempPathFactory, chat_model_folder: Any) -> Path:
    """A tiny Qwen2 folder whose bpe tokenizer (ChatML with tool calls) learnt the lead's and the
    subagents' traces, each rendered with its own tools."""
    rows = _rows(world_dir / "wideseek_sft_train.jsonl")
    corpus = [t for r in rows for t in chatml_text([r["messages"]], r["tools"])]
    return chat_model_folder(tmp_path_factory.mktemp("m") / "model", corpus)


def _config(
    world: Path, model: Path, subagents: dict[str, Any] | None = None, **algorithm: Any
) -> dict[str, Any]:
    return {
        "algorithm": {
            "name": "grpo_lm",
            "group_size": 2,
            "max_new_tokens": 48,
            "subagents": {"max_turns": 3, **(subagents or {})},
            **algorithm,
        },
        "model": {"path": str(model)},
        "data": {"train_files": [str(world / "train.jsonl")], "val_files": [str(world / "val.jsonl")]},
        "reward": {"name": "exact_match", "kwargs": {"normalize": True, "pattern": ANSWER_PATTERN}},
        "tools": [_search(world)],
    }


def _task(world: Path, model: Path, subagents: dict[str, Any] | None = None, **algorithm: Any) -> Any:
    run = load_lm_sections(_config(world, model, subagents, **algorithm))
    return make_task(run, task_tokenizer(run))


class Recorder:
    """Wraps a policy: the contexts of every ``generate`` call."""

    def __init__(self, policy: Any) -> None:
        self.policy, self.calls = policy, []

    def __call__(self, contexts: list[list[int]], n: int, stop: Any) -> list[list[int]]:
        self.calls.append([list(c) for c in contexts])
        return self.policy(contexts, n, stop)


@pytest.mark.timeout(300)  # a deadlock (every lead waiting on its subagents) fails, never hangs
def test_lead_and_subagents_play_token_in_token_out(world_dir: Path, model_dir: Path) -> None:
    task = _task(world_dir, model_dir)
    sub = task.subagents
    assert task.mode == "tools" and sub.tool == "ask" and sub.tools == ["search"]
    assert [t["function"]["name"] for t in task.chat.tools] == ["ask"]
    assert task.chat.tools[0] == ask_schema() and [t["function"]["name"] for t in sub.chat.tools] == [
        "search"
    ]
    # a policy that plays the careful teacher's traces, token for token as rlinf sft lays them out
    rows = _rows(world_dir / "wideseek_sft_val.jsonl")
    leads = {
        r["messages"][0]["content"]: task.chat.encode_conversation(r["messages"])
        for r in rows
        if r["agent"] == "lead"
    }
    subs = {
        r["messages"][0]["content"]: sub.chat.encode_conversation(r["messages"])
        for r in rows
        if r["agent"] == "sub"
    }
    want = [*leads.values(), *subs.values()]

    def teacher(contexts: list[list[int]], n: int, stop: Any) -> list[list[int]]:
        out = []
        for ctx in contexts:
            (ep,) = [e for e in want if e.sequence[: len(ctx)] == ctx and len(e.sequence) > len(ctx)]
            seg = next(
                ep.response_ids[s:e]
                for k, s, e in ep.segments
                if k == "sampled" and len(ep.prompt_ids) + s == len(ctx)
            )
            out.append(seg + [task.tok.pad_id] * 2)  # an engine's padding is dropped
        return out

    problems = task.heldout()[:2]
    policy = Recorder(teacher)
    eps = ToolAgent(task, task.tok, task.max_new_tokens(), 1024).run(problems, 2, policy)
    assert eps.num_episodes == 4 and eps.failures == [""] * 4
    assert eps.agent_kind == ["lead", "sub", "sub"] * 4 and eps.episode_index == [
        e for e in range(4) for _ in range(3)
    ]
    for e, p in enumerate([p for p in problems for _ in range(2)]):
        question = task.messages(p)[0]["content"]
        lead, s1, s2 = (3 * e + k for k in range(3))
        assert eps.sequences[lead] == leads[question].sequence
        assert eps.loss_masks[lead] == [0] * len(leads[question].prompt_ids) + leads[question].loss_mask
        for i, hop in zip(
            (s1, s2), sub_questions(next(q for q in _questions(world_dir) if q.text == question)), strict=True
        ):
            assert eps.sequences[i] == subs[hop].sequence  # the subagent's own context: its question only
            assert eps.loss_masks[i] == [0] * len(subs[hop].prompt_ids) + subs[hop].loss_mask
            assert question not in task.chat.decode(eps.sequences[i])
    # the subagents' turns are batched across leads: every batch holds all four leads or all four
    # leads' subagents, and while every lead waits on its subagent nothing deadlocks
    assert [len(c) for c in policy.calls] == [4] * 7
    r = task.score(eps.final_responses, eps.answers)
    assert list(r["rewards"]) == [1.0] * 4
    m = episode_metrics(eps, r["correct"])
    assert (m["turns"], m["tool_calls"], m["tool_calls/ask"], m["success"]) == (3.0, 2.0, 2.0, 1.0)
    assert (m["subagent_calls"], m["subagent_turns"], m["subagent_tool_calls/search"]) == (2.0, 2.0, 1.0)
    assert (m["subagent_answer_rate"], m["subagent_tool_errors"], m["tool_errors"]) == (1.0, 0.0, 0.0)
    assert eps.generated_tokens == sum(sum(mask) for mask in eps.loss_masks)


def _questions(world: Path) -> list[Any]:
    from rlinf_algos.lm.agentic.multihop import make_world

    return make_world(3, **SIZES).heldout


class ByRole:
    """Writes given turns: ``lead[k]`` as a lead's turn ``k``, ``sub[k]`` as a subagent's (the last
    one repeated), each followed by the end-of-turn token; a lead's context starts with a lead
    prompt."""

    def __init__(self, task: Any, lead: list[str], sub: list[str]) -> None:
        self.task, self.lead, self.sub = task, lead, sub
        self.lead_prompts = [task.prompt_ids(p) for p in task.heldout()]

    def __call__(self, contexts: list[list[int]], n: int, stop: Any) -> list[list[int]]:
        chat = self.task.chat
        out = []
        for ctx in contexts:
            is_lead = any(ctx[: len(p)] == p for p in self.lead_prompts)
            turn = chat.decode(ctx).count("<|im_start|>assistant") - 1
            turns = self.lead if is_lead else self.sub
            out.append([*chat.encode(turns[min(turn, len(turns) - 1)]), chat.end_of_turn_id][:n])
        return out


def _call(name: str, args: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def test_subagent_max_turns_malformed_and_surplus_calls(world_dir: Path, model_dir: Path) -> None:
    task = _task(world_dir, model_dir, {"max_turns": 2, "max_calls": 2}, max_new_tokens=200)
    company = _questions(world_dir)[0].company
    assert task.messages(task.heldout()[0])[0]["content"] == _questions(world_dir)[0].text
    lead = [
        _call("ask", {"question": "Who founded Veltrix?"})
        + _call("ask", {"q": "Where?"})  # malformed arguments
        + _call("ask", {"question": "Where is Kesh?"})
        + _call("ask", {"question": "One too many?"})  # past max_calls
        + "<tool_call>{oops</tool_call>"  # not JSON
        + _call("search", {"query": "Veltrix"}),  # not a tool of the lead
        "The answer is Kesh.",
    ]
    sub = [_call("ask", {"question": "again?"}) + _call("search", {"query": f"founder of {company}"})]
    policy = Recorder(ByRole(task, lead, sub))
    eps = ToolAgent(task, task.tok, task.max_new_tokens(), 1024).run(task.heldout()[:1], 1, policy)
    assert eps.agent_kind == ["lead", "sub", "sub"] and eps.failures == [""]
    text = task.chat.decode(eps.sequences[0])
    assert text.count("error: the subagent stopped on max_turns after 2 turns without an answer") == 2
    assert "malformed call to 'ask': expected {\"question\": a non-empty string}, got ['q']" in text
    assert "at most 2 'ask' calls per episode" in text and "not valid JSON" in text
    assert "unknown tool 'search'; available tools: ask" in text
    for seq in eps.sequences[1:]:  # each subagent: its own question, its search, then max_turns
        sub_text = task.subagents.chat.decode(seq)
        assert "unknown tool 'ask'; available tools: search" in sub_text
        assert f"{company} is a company" in sub_text  # the search's real results
        assert "Where is Kesh?" in sub_text or "Who founded Veltrix?" in sub_text
    (m,) = eps.metrics
    assert (m["tool_calls/ask"], m["tool_errors"], m["tool_malformed"], m["tool_unknown"]) == (
        4.0,
        3.0,
        2.0,
        1.0,
    )
    assert (m["subagent_calls"], m["subagent_turns"], m["subagent_answered"]) == (2.0, 4.0, 0.0)
    # the second turn's calls are not run (max_turns): one search and one unknown call each
    assert (m["subagent_tool_calls/search"], m["subagent_tool_errors"]) == (2.0, 2.0)
    # both subagents sampled in one batch, twice; then the lead's answer
    assert [len(c) for c in policy.calls] == [1, 2, 2, 1]


class HangingTools:
    """A tool provider whose calls never return (what a bug in a tool or its transport would
    do): the episodes must fail naming what they waited on, not hang."""

    def __init__(self) -> None:
        from rlinf_algos.tools.registry import ToolStats

        self.stats = ToolStats()

    def episode(self) -> HangingTools:
        return self

    def malformed(self, text: str, name: str = "(unparsed)") -> Any:
        raise AssertionError("no malformed call is written here")

    async def call(self, name: Any, arguments: Any) -> Any:
        import asyncio

        await asyncio.Event().wait()  # never set


@pytest.mark.timeout(120)  # without the bound it hangs: fail on the timeout instead
def test_a_tool_call_that_never_returns_fails_naming_what_each_episode_waits_on(
    world_dir: Path, model_dir: Path
) -> None:
    """A lead waits on its subagent, whose search never returns: within the episodes' stall
    timeout (``runner.worker_timeout`` plus the longest tool ``timeout_s``) the play fails with
    one line naming each episode's state, instead of the batcher waiting forever."""
    import time

    from rlinf_core.errors import RlinfError

    config = _config(world_dir, model_dir, {"max_turns": 2}, max_new_tokens=200)
    config["tools"][0]["timeout_s"] = 0.5
    config["runner"] = {"worker_timeout": 1.0}
    run = load_lm_sections(config)
    task = make_task(run, task_tokenizer(run))
    assert task.episode_config(1024).stall_timeout_s == 1.5
    lead = [_call("ask", {"question": "Who founded Veltrix?"}), "The answer is Kesh."]
    sub = [_call("search", {"query": "founder of Veltrix"})]
    t0 = time.perf_counter()
    with pytest.raises(RlinfError, match=r"no episode changed state within 1.5 s") as err:
        ToolAgent(task, task.tok, 200, 1024).run(
            task.heldout()[:1], 1, ByRole(task, lead, sub), HangingTools()
        )
    assert "(0,): waiting on subagents; (0, 0): in a tool call" in str(err.value)
    assert time.perf_counter() - t0 < 30


def test_the_lead_reward_and_group_advantage_are_shared_by_its_subagents(
    world_dir: Path, model_dir: Path
) -> None:
    import torch

    from rlinf_algos.lm.learner import pack_batch, sequence_advantages
    from rlinf_algos.lm.reward import Verifier

    task = _task(world_dir, model_dir, {"max_turns": 2}, max_new_tokens=200)
    (p,) = task.heldout()[:1]
    answer = task.sample(p).answer
    state = {"n": 0}

    class Alternate(ByRole):
        def __call__(self, contexts: list[list[int]], n: int, stop: Any) -> list[list[int]]:
            out = []
            for ctx in contexts:
                is_lead = any(ctx[: len(q)] == q for q in self.lead_prompts)
                if is_lead and "<tool_response>" in self.task.chat.decode(ctx):  # a lead's answer turn
                    state["n"] += 1
                    text = f"The answer is {answer}." if state["n"] % 2 else "The answer is nowhere."
                    out.append([*self.task.chat.encode(text), self.task.chat.end_of_turn_id])
                else:
                    out.extend(super().__call__([ctx], n, stop))
            return out

    lead = [_call("ask", {"question": "Who founded it?"}) + _call("ask", {"question": "Where?"})]
    eps = ToolAgent(task, task.tok, 200, 1024).run([p], 4, Alternate(task, lead, ["The answer is Ada."]))
    assert eps.agent_kind == ["lead", "sub", "sub"] * 4
    r = Verifier(task).compute({"response_ids": eps.final_responses, "answers": eps.answers})
    assert list(r["rewards"]) == [1.0, 0.0, 1.0, 0.0]  # one reward per lead episode: its outcome
    batch = pack_batch(eps.sequences, eps.loss_masks, task.tok.pad_id)
    index = torch.tensor(eps.episode_index)
    adv, uniform = sequence_advantages(torch.as_tensor(r["rewards"]), index, 4)
    lead_adv = adv[[0, 3, 6, 9]]
    assert torch.allclose(lead_adv, torch.tensor([1.0, -1.0, 1.0, -1.0]) * 0.8660254, atol=1e-5)
    assert torch.equal(adv, lead_adv[index]) and not uniform.any()  # every subagent gets its lead's
    assert batch["loss_mask"].shape[0] == 12


def test_subagents_with_their_tools_on_a_tool_server_are_the_in_process_ones(
    world_dir: Path, model_dir: Path, tool_server: Any
) -> None:
    """Placed agents: a lead's subagents reach the tools the way a placed agent does, through a
    :class:`~rlinf_algos.tools.placed.PlacedTools` client of a tool server over a channel, and
    play the same episodes token for token as with the tools in process."""
    task = _task(world_dir, model_dir, {"max_turns": 2}, max_new_tokens=200)
    company = _questions(world_dir)[0].company
    lead = [_call("ask", {"question": f"Who founded {company}?"}) + _call("ask", {"question": "x"}), "Done."]
    sub = [_call("search", {"query": f"founder of {company}"}), "The answer is someone."]
    agent = ToolAgent(task, task.tok, 200, 1024)
    here = agent.run(task.heldout()[:2], 2, ByRole(task, lead, sub))

    with tool_server(task.run.tools.entries) as (client, server):
        there = agent.run(task.heldout()[:2], 2, ByRole(task, lead, sub), tools=client)
    assert there.sequences == here.sequences and there.loss_masks == here.loss_masks
    assert there.agent_kind == here.agent_kind == ["lead", "sub", "sub"] * 4
    assert f"{company} is a company" in task.chat.decode(there.sequences[1])
    assert server.box.stats.calls["search"] == 8  # every subagent's search ran on the server
    drop = "tool_latency_s"
    assert [{k: v for k, v in m.items() if k != drop} for m in there.metrics] == [
        {k: v for k, v in m.items() if k != drop} for m in here.metrics
    ]


def test_the_subagents_section_is_checked(world_dir: Path, model_dir: Path) -> None:
    base = _config(world_dir, model_dir)
    for sub, why in (
        ({"tool": "search"}, r"algorithm.subagents.tool: 'search' is also a tool of the tools section"),
        ({"tools": []}, r"algorithm.subagents.tools: a subagent needs at least one tool"),
        ({"lead_tools": ["ask"]}, r"algorithm.subagents.lead_tools\[0\]: 'ask' is the subagent tool itself"),
        ({"max_turns": 0}, r"algorithm.subagents.max_turns"),
        ({"tool": "two words"}, r"algorithm.subagents.tool"),
        ({"tool_name": "ask"}, r"algorithm.subagents.tool_name: unknown key"),
    ):
        cfg = {**base, "algorithm": {**base["algorithm"], "subagents": sub}}
        with pytest.raises(ConfigError, match=why):
            load_lm_sections(cfg)
    no_tools = {k: v for k, v in base.items() if k != "tools"}
    with pytest.raises(ConfigError, match=r"algorithm.subagents: subagents search with the run's tools"):
        load_lm_sections(no_tools)
    # a name that is not one of the loaded tools is found when the tools load, with those that are
    for sub, where in (({"tools": ["serch"]}, "tools"), ({"lead_tools": ["python"]}, "lead_tools")):
        task = _task(world_dir, model_dir, sub)
        with pytest.raises(ConfigError, match=rf"algorithm.subagents.{where}\[0\]: .* they are: search"):
            task.chat  # noqa: B018


def test_wideseek_data_shares_the_multihop_world(world_dir: Path, tmp_path: Path) -> None:
    write_dataset(tmp_path, seed=3, **SIZES)
    for name in ("corpus", "train", "val"):
        assert (tmp_path / f"{name}.jsonl").read_bytes() == (world_dir / f"{name}.jsonl").read_bytes()
    rows = _rows(world_dir / "wideseek_sft_train.jsonl")
    leads = [r for r in rows if r["agent"] == "lead"]
    assert len(leads) == len(_rows(world_dir / "train.jsonl"))
    slipped = [r for r in leads if len([m for m in r["messages"] if m.get("tool_calls")]) == 1]
    assert 0 < len(slipped) < len(leads) and len(rows) == 3 * len(leads) - len(slipped)
    assert all(r["tools"] == [ask_schema()] for r in leads)
    subs = [r for r in rows if r["agent"] == "sub"]
    assert {t["function"]["name"] for r in subs for t in r["tools"]} == {"search"}
    for r in subs[:10]:  # the subagent's search finds the hop's answer in its real results
        answer = r["messages"][-1]["content"].removeprefix("The answer is ").removesuffix(".")
        assert answer in r["messages"][2]["content"]


def _train_and_eval(
    config: dict[str, Any], tmp_path: Path, host: Any, invoke: Any
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """``rlinf train`` one iteration of ``config`` (local scheduler), then ``rlinf eval`` of the
    run: the metrics row, the evaluation's JSON and its text."""
    import yaml

    config["algorithm"].update(
        prompts_per_iter=2, iterations=1, max_turns=3, max_response_tokens=200, minibatch_size=8,
        kl_coef=0.0, temperature=0.5,
    )  # fmt: skip
    config["data"].update(train_files=[str(Path(config["data"]["val_files"][0]))], max_samples=2)
    config["runner"] = {"scheduler": "local", "loggers": ["csv"], "checkpoint_interval": 0, "seed": 0}
    (tmp_path / "grpo.yaml").write_text(yaml.safe_dump(config))
    run_dir = tmp_path / "run"
    res = invoke(host, "train", str(tmp_path / "grpo.yaml"), "--run-dir", str(run_dir))
    assert res.exit_code == 0, (res.output, res.exception)
    (row,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"tool_calls/ask", "subagent_calls", "subagent_turns", "subagent_tool_calls/search"} <= set(header)
    assert {"subagent_answer_rate", "subagent_tool_errors", "subagent_tool_calls"} <= set(row)
    assert row["sequences"] == 4 * (1 + row["subagent_calls"])  # every lead's and subagent's sequence
    res = invoke(host, "eval", str(run_dir), "--json")
    assert res.exit_code == 0, (res.output, res.exception)
    ev = json.loads(res.output)
    assert ev["problems"] == 2 and "subagent_calls" in ev["tools"]
    res = invoke(host, "eval", str(run_dir))
    assert res.exit_code == 0, (res.output, res.exception)
    return row, ev, res.output


def test_one_grpo_iteration_through_rlinf_train_then_rlinf_eval(
    world_dir: Path, model_dir: Path, tmp_path: Path, host: Any, invoke: Any
) -> None:
    """The YAML alone switches the shape on: ``rlinf train`` writes the subagent figures per
    iteration and ``rlinf eval RUN`` reports them (a random policy: its leads rarely call)."""
    config = _config(world_dir, model_dir, {"max_turns": 2, "max_response_tokens": 160})
    _, _, text = _train_and_eval(config, tmp_path, host, invoke)
    assert "subagent calls per episode" in text


@pytest.fixture(scope="module")
def warm_policy(world_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``rlinf sft`` of a tiny model on 24 rows of the lead's and the subagents' traces (each
    row rendered with its own tools, ``data.tools_key``): a policy whose leads call ``ask``."""
    from rlinf_algos.lm.finetune import load_sft_config, train_sft

    sft = {
        "model": {
            "init": {
                "hidden_size": 64, "num_layers": 2, "num_heads": 2, "max_position_embeddings": 512,
                "tokenizer": "bpe", "vocab_size": 800,
            }
        },
        "data": {
            "train_files": [str(world_dir / "wideseek_sft_train.jsonl")],
            "val_files": [str(world_dir / "wideseek_sft_val.jsonl")],
            "messages_key": "messages", "tools_key": "tools", "max_samples": 24,
        },
        "train": {"steps": 150, "batch_size": 8, "lr": 3e-3, "eval_generate": 0, "max_length": 512},
        "runner": {"log_interval": 50, "loggers": ["csv"], "torch_threads": 2},
    }  # fmt: skip
    out = tmp_path_factory.mktemp("sft") / "run"
    res = train_sft(load_sft_config(sft), out, log=None)
    assert res.summary["train_examples"] == 24
    return out / "policy"


@pytest.mark.slow
def test_a_warm_policy_trains_leads_and_subagents_then_rlinf_eval(
    world_dir: Path, warm_policy: Path, tmp_path: Path, host: Any, invoke: Any
) -> None:
    """After the warm start, ``rlinf train`` plays leads that call subagents and trains on their
    sequences; ``rlinf eval`` reports the subagent figures."""
    config = _config(world_dir, warm_policy, {"max_turns": 2, "max_response_tokens": 160})
    row, ev, _ = _train_and_eval(config, tmp_path, host, invoke)
    assert row["subagent_calls"] > 0 and row["sequences"] > 4, row  # leads and their subagents trained on
    assert ev["tools"]["subagent_calls"] > 0


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.extended  # seven Ray processes: 3 minutes on CI's 2 cores; the local variant runs in CI
@pytest.mark.timeout(900)  # a wait without a bound fails the test, never hangs CI
def test_leads_and_subagents_on_placed_agents_and_a_tool_component(
    world_dir: Path, warm_policy: Path, tmp_path: Path, host: Any, invoke: Any
) -> None:
    """On a real embedded Ray: ``rlinf train --dry-run`` plans two agent processes beside
    ``algorithm.subagents``; then they play the leads and their subagents against the rollout
    worker, the subagents' searches go to a tool process, for one GRPO iteration on the leads'
    and the subagents' sequences."""
    import yaml

    from rlinf_algos.training import run_training
    from rlinf_scheduler.runtime.cluster import Cluster

    config = _config(world_dir, warm_policy, {"max_turns": 2, "max_response_tokens": 160})
    config["algorithm"].update(
        prompts_per_iter=2, iterations=1, max_turns=3, max_response_tokens=200, minibatch_size=8,
        kl_coef=0.0, temperature=0.5,
    )  # fmt: skip
    config["data"].update(train_files=[str(world_dir / "val.jsonl")], max_samples=2)
    node = {"node_group": "node", "placement": "0"}
    config["cluster"] = {
        "num_nodes": 1,
        "component_placement": {
            "actor": node, "rollout": node, "reward": node, "tool": node,
            "agent": {"node_group": "node", "placement": "0:0-1"},
        },
    }  # fmt: skip
    config["runner"] = {
        "scheduler": "ray",
        "loggers": ["csv"],
        "checkpoint_interval": 0,
        "worker_timeout": 120,
    }
    (tmp_path / "grpo.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "inv.yaml").write_text("nodes:\n  - node_ranks: 0\n    gpus: 0\n")
    res = invoke(
        host, "train", str(tmp_path / "grpo.yaml"), "--dry-run", "--inventory", str(tmp_path / "inv.yaml")
    )
    assert res.exit_code == 0, (res.output, res.exception)
    assert "agent: 2 processes on nodes 0 " in res.output, res.output
    cluster = Cluster(1, ray_init={"num_cpus": 2})
    try:
        summary = run_training(config, run_dir=tmp_path / "run")
    finally:
        cluster.shutdown()
    assert summary["placement"]["agent"]["processes"] == 2
    assert summary["placement"]["tool"]["processes"] == 1
    assert summary["iterations"] == 1 and summary["events"] == [], summary["events"]
    (row,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert row["subagent_calls"] > 0 and row["sequences"] == 4 * (1 + row["subagent_calls"]), row
