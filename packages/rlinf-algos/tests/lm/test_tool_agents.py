"""Tool-calling agents in training (issue 40): ``rlinf sft`` on TRL-format conversations with tool
calls (the loss on assistant turns only, laid out as a played episode is), the ``tools`` task of
``grpo_lm`` (:class:`~rlinf_algos.lm.tasks.ToolTask`, :class:`~rlinf_algos.lm.agents.ToolAgent`):
token in and token out through the task, tool errors, timeouts and malformed arguments answered
and counted, ``max_turns``, a user's tool file, a tool plugin package found by its entry point,
one GRPO iteration in process, and the search example's generator (deterministic; every question
needs its two hops, checked with the index)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rlinf_algos.lm.agentic import ChatFormat, parse_tool_calls
from rlinf_algos.lm.agentic.multihop import (
    ANSWER_PATTERN,
    answer_matches,
    make_world,
    teacher_trace,
    two_hop_problem,
    write_dataset,
)
from rlinf_algos.lm.agents import ToolAgent, episode_metrics
from rlinf_algos.lm.config import load_lm_sections
from rlinf_algos.lm.finetune import load_examples, load_sft_config, train_sft
from rlinf_algos.lm.tasks import ToolTask, make_task, task_tokenizer
from rlinf_algos.lm.tokens import LMTokenizer, bpe_tokenizer, chatml_text
from rlinf_algos.tools import load_tools
from rlinf_algos.tools.search import Search
from rlinf_core.errors import ConfigError

SIZES = {"companies": 24, "heldout_companies": 6, "cities": 16, "heldout_cities": 6, "countries": 4}
"""A small world: enough for every check, seconds to write."""


@pytest.fixture(scope="module")
def world_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("world")
    write_dataset(out, seed=3, **SIZES)
    return out


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _search_entry(world: Path) -> dict[str, Any]:
    return {"name": "search", "kwargs": {"corpus": str(world / "corpus.jsonl"), "top_k": 3}}


@pytest.fixture(scope="module")
def model_dir(world_dir: Path, tmp_path_factory: pytest.TempPathFactory, chat_model_folder: Any) -> Path:
    """A tiny Qwen2 folder whose bpe tokenizer (ChatML with tool calls) learnt the traces."""
    schemas = load_tools([_search_entry(world_dir)]).schemas
    convs = [r["messages"] for r in _rows(world_dir / "sft_train.jsonl")]
    return chat_model_folder(tmp_path_factory.mktemp("m") / "model", chatml_text(convs, schemas))


# -- the search example's data ------------------------------------------------------------------


def test_the_generator_is_deterministic_and_every_question_needs_two_hops(
    world_dir: Path, tmp_path: Path
) -> None:
    write_dataset(tmp_path / "again", seed=3, **SIZES)
    for name in ("corpus", "train", "val", "sft_train", "sft_val"):
        assert (tmp_path / "again" / f"{name}.jsonl").read_bytes() == (
            world_dir / f"{name}.jsonl"
        ).read_bytes()
    write_dataset(tmp_path / "other", seed=4, **SIZES)
    assert (tmp_path / "other" / "corpus.jsonl").read_bytes() != (world_dir / "corpus.jsonl").read_bytes()

    world = make_world(3, **SIZES)
    assert len(world.train) + len(world.heldout) + sum(world.dropped.values()) == 2 * (24 + 6)
    assert len(world.heldout) >= 8
    # the real tool, over the file the runs index: the question alone never retrieves the answer,
    # while the company's name and then the bridge's name lead to it
    tool = Search(str(world_dir / "corpus.jsonl"), top_k=3)
    docs = {d["id"]: d["text"] for d in _rows(world_dir / "corpus.jsonl")}

    def retrieve(q: str) -> list[dict[str, str]]:
        return [{"id": h.id, "text": h.text} for h in tool.index.search(q, 3)]

    for q in world.train + world.heldout:
        assert two_hop_problem(q, retrieve) == ""
        assert all(q.answer.casefold() not in d["text"].casefold() for d in retrieve(q.text))
        assert q.bridge in docs[q.company_doc] and q.answer in docs[q.bridge_doc]
        assert q.answer not in docs[q.company_doc] and q.shortcut != q.answer
    # held-out questions are about entities no training question mentions
    seen = {x for q in world.train for x in (q.company, q.bridge)}
    assert not seen & {x for q in world.heldout for x in (q.company, q.bridge)}
    train_cities = {q.answer for q in world.train if q.kind == "birth"}
    assert not train_cities & {q.answer for q in world.heldout if q.kind == "birth"}
    # ...but, in the default world, of words the training questions use (two words a name), and
    # a company's first word never names a person
    full = make_world(0)
    known = {w for q in full.train for x in (q.company, q.bridge, q.answer) for w in x.split()}
    held = [w for q in full.heldout for x in (q.company, q.bridge, q.answer) for w in x.split()]
    assert sum(w in known for w in held) >= 0.99 * len(held)
    assert all(len(q.company.split()) == len(q.bridge.split()) == 2 for q in full.heldout)
    people = {w for q in full.train if q.kind == "birth" for w in q.bridge.split()}
    assert not {q.company.split()[0] for q in full.train} & people
    with pytest.raises(ValueError, match=r"400 companies need at least \d+ name words \(words\), got 60"):
        make_world(3, companies=300, heldout_companies=100, words=60)
    # the traces hold the tool's real results; the careless ones stop after one search
    rows = _rows(world_dir / "sft_train.jsonl")
    assert {r["slip"] for r in rows} == {True, False}
    for r in rows[:20]:
        calls = [m for m in r["messages"] if m.get("tool_calls")]
        results = [m for m in r["messages"] if m["role"] == "tool"]
        assert len(calls) == (1 if r["slip"] else 2) == len(results)
        for c, res in zip(calls, results, strict=True):
            assert res["content"] == tool.search(c["tool_calls"][0]["function"]["arguments"]["query"])


# -- conversations for rlinf sft ----------------------------------------------------------------

OWN_TEMPLATE = (
    "{%- if tools %}[TOOLS]{% for t in tools %} {{ t.function.name }}{% endfor %}[/TOOLS]{% endif %}"
    "{%- for m in messages %}<|turn|>{{ m.role }}: {{ m.content }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}</tool_call>{% endfor %}"
    "<|end|>\n{% endfor %}{%- if add_generation_prompt %}<|turn|>assistant: {% endif %}"
)
"""A layout written here: its own turn tokens, tool calls right after the content without a
newline, each tool result a turn of its own."""


@pytest.fixture(params=["chatml", "own"])
def chat(request: pytest.FixtureRequest, world_dir: Path) -> ChatFormat:
    convs = [r["messages"] for r in _rows(world_dir / "sft_train.jsonl")]
    schemas = load_tools([_search_entry(world_dir)]).schemas
    tok = bpe_tokenizer(chatml_text(convs, schemas), vocab_size=400)
    if request.param == "own":
        tok.add_special_tokens({"additional_special_tokens": ["<|turn|>", "<|end|>"]})
        tok.eos_token = "<|end|>"
        tok.chat_template = OWN_TEMPLATE
    return ChatFormat(tok, schemas)


def test_a_conversation_trains_on_its_assistant_turns_only(chat: ChatFormat, world_dir: Path) -> None:
    row = next(r for r in _rows(world_dir / "sft_train.jsonl") if not r["slip"])
    msgs = row["messages"]
    ep = chat.encode_conversation(msgs)
    assert [k for k, _, _ in ep.segments] == ["sampled", "inserted", "sampled", "inserted", "sampled"]
    sampled = [ep.response_ids[s:e] for k, s, e in ep.segments if k == "sampled"]
    for k, s, e in ep.segments:
        assert set(ep.loss_mask[s:e]) == {1 if k == "sampled" else 0}
    assert sum(ep.loss_mask) == sum(map(len, sampled))
    # every trained turn ends with the template's end-of-turn token and is what the policy must
    # write: the calls parse back to the trace's calls, the last turn is the answer
    stop = chat.end_of_turn_id
    assert all(t[-1] == stop for t in sampled)
    texts = [chat.decode(t[:-1]) for t in sampled]
    want = [m["tool_calls"][0]["function"] for m in msgs if m.get("tool_calls")]
    for text, fn in zip(texts[:2], want, strict=True):
        (call,) = parse_tool_calls(text)
        assert (call.name, call.arguments) == (fn["name"], fn["arguments"])
    assert texts[2] == msgs[-1]["content"] and parse_tool_calls(texts[2]) == []
    # the tool results are in the context, never trained on
    inserted = chat.decode([t for k, s, e in ep.segments if k == "inserted" for t in ep.response_ids[s:e]])
    assert msgs[2]["content"] in inserted and msgs[4]["content"] in inserted
    # the whole sequence is the template's rendering of the conversation
    rest = chat.closing[len(chat.decode([stop])) :]
    assert chat.decode(ep.sequence) + rest == chat.render(msgs, add_generation_prompt=False)


def test_rlinf_sft_on_conversations(world_dir: Path, tmp_path: Path) -> None:
    cfg = {
        "model": {
            "init": {
                "hidden_size": 32,
                "num_layers": 2,
                "num_heads": 2,
                "max_position_embeddings": 512,
                "tokenizer": "bpe",
                "vocab_size": 800,
            }
        },
        "data": {
            "train_files": [str(world_dir / "sft_train.jsonl")],
            "val_files": [str(world_dir / "sft_val.jsonl")],
            "messages_key": "messages",
            "max_samples": 12,
        },
        "tools": [_search_entry(world_dir)],
        "train": {"steps": 3, "batch_size": 4, "eval_generate": 2, "max_length": 512},
        "runner": {"log_interval": 1, "loggers": ["csv"]},
    }
    res = train_sft(load_sft_config(cfg), tmp_path / "run", log=None)
    s = res.summary
    assert (s["steps"], s["train_examples"], s["val_generate"]) == (3, 12, 2)
    assert s["val_exact_match_after"] is not None and (tmp_path / "run" / "policy" / "config.json").is_file()
    # the examples: one per conversation, masked as the episode layout says
    from transformers import AutoTokenizer

    folder = tmp_path / "run" / "policy"
    hf_tok = AutoTokenizer.from_pretrained(str(folder))
    sft = load_sft_config(cfg)
    schemas = load_tools([_search_entry(world_dir)]).schemas
    examples = load_examples(sft.data, "train", LMTokenizer.from_folder(folder), hf_tok, 512, schemas)
    chat = ChatFormat(hf_tok, schemas)
    for ex, row in zip(examples.examples, _rows(world_dir / "sft_train.jsonl"), strict=False):
        ep = chat.encode_conversation(row["messages"])
        assert ex.ids == ep.sequence and ex.mask == [0] * len(ep.prompt_ids) + ep.loss_mask
        assert len(ex.turns) == (2 if row["slip"] else 3)
    # assistant_only_loss: false (TRL's assistant_only_loss=False): every token after the first
    everything = load_sft_config({**cfg, "data": {**cfg["data"], "assistant_only_loss": False}})
    all_tokens = load_examples(
        everything.data, "train", LMTokenizer.from_folder(folder), hf_tok, 512, schemas
    )
    for ex, only in zip(all_tokens.examples, examples.examples, strict=True):
        assert ex.ids == only.ids and ex.turns == only.turns
        assert ex.mask == [0] + [1] * (len(ex.ids) - 1) and sum(only.mask) < sum(ex.mask)
    # the configuration and the data are checked, with their YAML paths and rows
    pairs = tmp_path / "pairs.jsonl"  # prompt-response rows: no conversations to render schemas for
    pairs.write_text(json.dumps({"prompt": "q", "response": "a"}) + "\n")
    bad = {**cfg, "data": {**cfg["data"], "messages_key": None, "train_files": [str(pairs)]}}
    with pytest.raises(ConfigError, match=r"tools: tool schemas are rendered for conversations"):
        load_sft_config(bad)
    rows = (
        [{"role": "user", "content": "hi"}],
        [
            {"role": "user", "content": "q"},
            {"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]},
        ],
    )
    for i, (msgs, why) in enumerate(
        zip(rows, ("no assistant message", "message 1: a tool call must be"), strict=True)
    ):
        one = tmp_path / f"b{i}.jsonl"
        one.write_text(json.dumps({"id": i}) + "\n" + json.dumps({"messages": msgs}) + "\n")
        run = load_sft_config({**cfg, "data": {**cfg["data"], "train_files": [str(one)], "val_files": []}})
        with pytest.raises(ConfigError, match=rf"data.messages_key: .*b{i}.jsonl:1: no 'messages'"):
            train_sft(run, tmp_path / f"r{i}", log=None)
        one.write_text(json.dumps({"messages": msgs}) + "\n")
        with pytest.raises(ConfigError, match=rf"data.messages_key: .*b{i}.jsonl:1: .*{why}"):
            train_sft(run, tmp_path / f"r{i}", log=None)
        assert not (tmp_path / f"r{i}").exists()


# -- the tools task of grpo_lm ------------------------------------------------------------------

USER_TOOLS = '''
import time


def lookup(entity: str) -> str:
    """Look an entity up.

    Args:
        entity: its name.
    """
    return f"{entity} is made up"


def broken(x: int) -> int:
    """Always fails.

    Args:
        x: ignored.
    """
    raise ValueError(f"cannot handle {x}")


def slow(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: how long.
    """
    time.sleep(seconds)
    return "awake"
'''


def _run(world: Path, model: Path, tools: list[Any], **algorithm: Any) -> Any:
    return load_lm_sections(
        {
            "algorithm": {"name": "grpo_lm", "group_size": 2, **{"max_new_tokens": 48, **algorithm}},
            "model": {"path": str(model)},
            "data": {
                "train_files": [str(world / "train.jsonl")],
                "val_files": [str(world / "val.jsonl")],
            },
            "reward": {"name": "exact_match", "kwargs": {"normalize": True, "pattern": ANSWER_PATTERN}},
            "tools": tools,
        }
    )


class Scripted:
    """Writes given texts as turns (turn k of an episode: ``turns[k]``, the last one repeated),
    each followed by the end-of-turn token."""

    def __init__(self, chat: ChatFormat, turns: list[str]) -> None:
        self.chat, self.turns = chat, turns
        self.prompts: list[list[int]] = []
        self.count: list[int] = []

    def __call__(self, contexts: list[list[int]], n: int, stop: Any) -> list[list[int]]:
        out = []
        for ctx in contexts:
            i = next((i for i, p in enumerate(self.prompts) if ctx[: len(p)] == p), None)
            if i is None:
                self.prompts.append(list(ctx))
                self.count.append(0)
                i = len(self.prompts) - 1
            text = self.turns[min(self.count[i], len(self.turns) - 1)]
            self.count[i] += 1
            out.append([*self.chat.encode(text), self.chat.end_of_turn_id][:n])
        return out


def test_the_tools_task_plays_episodes_token_in_token_out(world_dir: Path, model_dir: Path) -> None:
    run = _run(world_dir, model_dir, [_search_entry(world_dir)])
    task = make_task(run, task_tokenizer(run))
    assert isinstance(task, ToolTask) and task.mode == "tools"
    agent = ToolAgent(task, task.tok, task.max_new_tokens(), 1024)
    problems = task.heldout()[:2]
    # a policy that plays the careful teacher's traces, token for token as rlinf sft trains them
    traces = {r["messages"][0]["content"]: r["messages"] for r in _rows(world_dir / "sft_val.jsonl")}
    want = {q: task.chat.encode_conversation(m) for q, m in traces.items()}

    def teacher(contexts: list[list[int]], n: int, stop: Any) -> list[list[int]]:
        out = []
        for ctx in contexts:
            (ep,) = [e for e in want.values() if e.sequence[: len(ctx)] == ctx]
            seg = next(
                ep.response_ids[s:e]
                for k, s, e in ep.segments
                if k == "sampled" and len(ep.prompt_ids) + s == len(ctx)
            )
            out.append(seg + [task.tok.pad_id] * 3)  # an engine's padding is dropped
        return out

    eps = agent.run(problems, 2, teacher)
    assert eps.num_episodes == 4 and eps.failures == [""] * 4
    for e, p in enumerate([p for p in problems for _ in range(2)]):
        ep = want[task.messages(p)[0]["content"]]
        assert eps.sequences[e] == ep.sequence  # exactly the layout rlinf sft trained on
        assert eps.loss_masks[e] == [0] * len(ep.prompt_ids) + ep.loss_mask
        assert eps.sequences[e][: len(task.prompt_ids(p))] == task.prompt_ids(p)
    r = task.score(eps.final_responses, eps.answers)
    assert list(r["rewards"]) == [1.0] * 4 and all(r["well_formed"])
    m = episode_metrics(eps, r["correct"])
    assert (m["turns"], m["answer_rate"], m["tool_calls/search"], m["success"]) == (3.0, 1.0, 2.0, 1.0)
    assert m["tool_errors"] == m["tool_timeouts"] == m["tool_malformed"] == 0


def test_tool_errors_timeouts_malformed_calls_and_max_turns(
    world_dir: Path, model_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "my_tools.py").write_text(USER_TOOLS)
    tools = [
        {"path": str(tmp_path / "my_tools.py"), "name": "lookup"},
        {"path": str(tmp_path / "my_tools.py"), "name": "broken"},
        {"path": str(tmp_path / "my_tools.py"), "name": "slow", "timeout_s": 0.2},
    ]
    run = _run(world_dir, model_dir, tools, max_turns=3, max_new_tokens=200)
    task = make_task(run, task_tokenizer(run))
    assert [t["function"]["name"] for t in task.chat.tools] == ["lookup", "broken", "slow"]
    agent = ToolAgent(task, task.tok, task.max_new_tokens(), 1024)

    def call(name: str, args: Any) -> str:
        return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"

    turns = [
        call("lookup", {"entity": "Veltrix"}) + call("broken", {"x": 3}),
        call("slow", {"seconds": 30}) + call("lookup", {"entity": 7}) + "<tool_call>{oops</tool_call>",
        call("lookup", {"entity": "again"}),  # the third turn: max_turns, its call is not run
    ]
    policy = Scripted(task.chat, turns)
    (problem,) = task.heldout()[:1]
    eps = agent.run([problem], 1, policy)
    (m,) = eps.metrics
    assert eps.failures == ["stopped on max_turns after 3 turns"]
    assert (m["turns"], m["answered"], m["tool_calls"]) == (3.0, 0.0, 5.0)
    assert (m["tool_errors"], m["tool_timeouts"], m["tool_malformed"]) == (1.0, 1.0, 2.0)
    text = task.chat.decode(eps.sequences[0])
    assert "Veltrix is made up" in text and "raised ValueError: cannot handle 3" in text
    assert "timed out after 0.2 s" in text and "argument 'entity' must be string, got int" in text
    assert "not valid JSON" in text and "again is made up" not in text
    r = task.score(eps.final_responses, eps.answers)
    assert list(r["rewards"]) == [0.0]  # the last turn was a call, not the answer
    # a user tool that does not load is a one-line error naming the entry
    (tmp_path / "bad_tools.py").write_text("def nope(x):\n    return x\n")
    bad = _run(world_dir, model_dir, [{"path": str(tmp_path / "bad_tools.py"), "name": "nope"}])
    with pytest.raises(ConfigError, match=r"tools\[0\]: tool 'nope' in .*bad_tools.py"):
        make_task(bad, task_tokenizer(bad)).chat  # noqa: B018


def test_a_tool_plugin_package_is_found_by_its_entry_point(
    world_dir: Path, model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package as pip installs it: its module and a ``.dist-info`` with an ``rlinf`` entry
    point, on the path; the run names its tool and nothing else."""
    site = tmp_path / "site"
    pkg = site / "rlinf_tools_demo"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "plugin.py").write_text(
        textwrap.dedent(
            '''
            from rlinf_core import hookimpl


            def atlas(place: str) -> str:
                """Where a place is.

                Args:
                    place: its name.
                """
                return f"{place} is on the map"


            @hookimpl
            def rlinf_register_tools():
                return [atlas]
            '''
        )
    )
    info = site / "rlinf_tools_demo-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlinf-tools-demo\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[rlinf]\ntools-demo = rlinf_tools_demo.plugin\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "rlinf_tools_demo", raising=False)
    run = _run(world_dir, model_dir, ["atlas", _search_entry(world_dir)], max_turns=2)
    task = make_task(run, task_tokenizer(run))
    assert task.toolbox.tools["atlas"].where.startswith("plugin 'tools-demo' (rlinf-tools-demo 0.1.0")
    policy = Scripted(
        task.chat, ['<tool_call>\n{"name": "atlas", "arguments": {"place": "Kesh"}}\n</tool_call>', "Kesh"]
    )
    eps = ToolAgent(task, task.tok, 48, 1024).run(task.heldout()[:1], 1, policy)
    assert "Kesh is on the map" in task.chat.decode(eps.sequences[0])
    assert eps.metrics[0]["tool_calls/atlas"] == 1.0 and eps.failures == [""]


def test_one_grpo_iteration_of_the_tools_task_then_rlinf_eval(
    world_dir: Path, model_dir: Path, tmp_path: Path, host: Any, invoke: Any
) -> None:
    """``rlinf train`` takes a tools section and writes the tool figures per iteration;
    ``rlinf eval RUN`` replays the run's episodes and reports success and tool use per
    data_source."""
    import yaml

    config = {
        "algorithm": {
            "name": "grpo_lm",
            "group_size": 2,
            "prompts_per_iter": 2,
            "iterations": 1,
            "max_new_tokens": 12,
            "max_turns": 2,
            "max_response_tokens": 64,
            "minibatch_size": 4,
            "kl_coef": 0.0,
        },
        "model": {"path": str(model_dir)},
        "data": {
            "train_files": [str(world_dir / "train.jsonl")],
            "val_files": [str(world_dir / "val.jsonl")],
            "max_samples": 3,
        },
        "reward": {"name": "exact_match", "kwargs": {"normalize": True, "pattern": ANSWER_PATTERN}},
        "tools": [_search_entry(world_dir)],
        "runner": {"scheduler": "local", "loggers": ["csv"], "checkpoint_interval": 0},
    }
    (tmp_path / "grpo.yaml").write_text(yaml.safe_dump(config))
    run_dir = tmp_path / "run"
    res = invoke(host, "train", str(tmp_path / "grpo.yaml"), "--run-dir", str(run_dir))
    assert res.exit_code == 0, (res.output, res.exception)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["mode"] == "tools" and summary["iterations"] == 1 and summary["eval_size"] == 3
    (row,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert row["sequences"] == 4 and 1.0 <= row["turns"] <= 2.0
    for key in ("answer_rate", "tool_calls", "tool_errors", "tool_timeouts", "tool_malformed", "success"):
        assert key in row
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"turns", "tool_calls/search", "tool_errors", "success"} <= set(header)
    assert (run_dir / "policy" / "config.json").is_file()
    # rlinf eval RUN plays the same episodes from the run's config.yaml, with the tool figures
    res = invoke(host, "eval", str(run_dir), "--json")
    assert res.exit_code == 0, (res.output, res.exception)
    ev = json.loads(res.output)
    assert ev["problems"] == 3 and 1.0 <= ev["tools"]["turns"] <= 2.0
    sources = ev["per_data_source"]
    assert set(sources) <= {"rlinf/multihop_birth_city", "rlinf/multihop_country"}
    for fig in sources.values():
        assert {"success", "turns", "tool_calls/search", "tool_errors", "tool_timeouts"} <= set(fig["tools"])
        assert fig["tools"]["success"] == fig["accuracy"]
    res = invoke(host, "eval", str(run_dir))
    assert res.exit_code == 0, (res.output, res.exception)
    lines = res.output.splitlines()
    assert len(lines) == 1 + len(sources)
    for line, src in zip(lines[1:], sources, strict=True):
        assert line.startswith(f"  {src} (") and "turns and" in line and "(search " in line
        assert " errors, " in line and " timeouts, " in line


def test_the_tools_section_is_checked() -> None:
    base = {"algorithm": {"name": "grpo_lm"}, "data": {"train_files": ["q.jsonl"]}}
    for tools, why in (
        ([], "lists no tool"),
        (["search", "search"], "names 'search' twice"),
        ([{"name": "search", "kwarg": {}}], r"tools\[0\]\.kwarg: unknown key"),
    ):
        with pytest.raises(ConfigError, match=why):
            load_lm_sections({**base, "tools": tools})
    with pytest.raises(ConfigError, match=r"tools: tool-calling episodes start from a data set"):
        load_lm_sections({"algorithm": {"name": "grpo_lm"}, "tools": ["search"]})
    from rlinf_algos.lm.config import RewardConfig
    from rlinf_algos.lm.rewards import load_reward

    for pattern, why in (("answer is .+", "has no group"), ("answer is (", "is not a regular expression")):
        with pytest.raises(ConfigError, match=rf"reward.kwargs: reward 'exact_match': .*{why}"):
            load_reward(RewardConfig(name="exact_match", kwargs={"pattern": pattern}))
    run = load_lm_sections({**base, "tools": ["python"], "algorithm": {"name": "grpo_lm", "max_turns": 6}})
    assert run.tools.entries[0].name == "python" and run.algorithm.max_turns == 6


INVALID_TOOLS = [
    ({"name": "nope"}, r"tools\[0\]\.name: unknown tool 'nope'; available: .*python.*search"),
    ({"name": "python", "kwargs": {"memory_mb": -1}}, r"tools\[0\]\.kwargs\.memory_mb"),
    ({"name": "python", "kwargs": {"wall_s": float("nan")}}, r"tools\[0\]\.kwargs\.wall_s"),
    ({"name": "python", "kwargs": {"wall_s": float("inf")}}, r"tools\[0\]\.kwargs\.wall_s"),
    ({"name": "python", "kwargs": {"cpu_s": 0}}, r"tools\[0\]\.kwargs\.cpu_s"),
    ({"name": "python", "kwargs": {"max_output_chars": -5}}, r"tools\[0\]\.kwargs\.max_output_chars"),
    ({"name": "python", "kwargs": {"max_procs": 0}}, r"tools\[0\]\.kwargs\.max_procs"),
    ({"name": "python", "kwargs": {"isolation": "none"}}, r"tools\[0\]\.kwargs\.isolation"),
    ({"name": "python", "kwargs": {"cpus": 1}}, r"tools\[0\]\.kwargs\.cpus"),
    ({"name": "python", "kwargs": {"cpu_s": "fast"}}, r"tools\[0\]\.kwargs\.cpu_s"),
    ({"name": "search"}, r"tools\[0\]\.kwargs\.corpus"),
    ({"name": "search", "kwargs": {"corpus": "no/such/corpus.jsonl"}}, r"kwargs\.corpus: .*not found"),
    ({"name": "search", "kwargs": {"corpus": "CORPUS", "top_k": 0}}, r"tools\[0\]\.kwargs\.top_k"),
    ({"name": "search", "kwargs": {"corpus": "CORPUS", "b": 2}}, r"tools\[0\]\.kwargs\.b"),
    ({"name": "x", "path": "no/such/tools.py"}, r"tools\[0\]\.path: tool file not found"),
    ({"name": "x", "path": "BROKEN"}, r"tools\[0\]\.path: .*SyntaxError at line 1"),
    ({"name": "x", "path": "BINARY"}, r"tools\[0\]\.path: .*not UTF-8"),
    ({"name": "missing", "path": "TOOLS"}, r"tools\[0\]\.name: .*defines no 'missing'; .*lookup"),
    ({"name": "lookup", "path": "TOOLS", "kwargs": {"k": 1}}, r"tools\[0\]\.kwargs: 'lookup' is a function"),
    ({"name": "python", "timeout_s": -1}, r"tools\[0\]\.timeout_s"),
]


def _tool_files(tmp_path: Path, world_dir: Path, entry: dict[str, Any]) -> dict[str, Any]:
    (tmp_path / "broken.py").write_text("def (:\n")
    (tmp_path / "binary.py").write_bytes(b"\xff\xfe\x00def")
    (tmp_path / "tools.py").write_text(
        'def lookup(k: str) -> str:\n    """Look up.\n\n    Args:\n        k: key\n    """\n'
    )
    names = {"BROKEN": "broken.py", "BINARY": "binary.py", "TOOLS": "tools.py"}
    out = json.loads(json.dumps(entry))
    if out.get("path") in names:
        out["path"] = str(tmp_path / names[out["path"]])
    if out.get("kwargs", {}).get("corpus") == "CORPUS":
        out["kwargs"]["corpus"] = str(world_dir / "corpus.jsonl")
    return out


@pytest.mark.parametrize("entry,why", INVALID_TOOLS, ids=[str(i) for i in range(len(INVALID_TOOLS))])
def test_an_invalid_tools_entry_fails_validation_at_its_yaml_path(
    entry: dict[str, Any], why: str, tmp_path: Path, world_dir: Path
) -> None:
    """What used to pass ``--dry-run`` and fail when the tools loaded in the run: a name, a file,
    a kwarg, a limit (negative, zero, NaN, infinite), a corpus."""
    base = {"algorithm": {"name": "grpo_lm"}, "data": {"train_files": ["q.jsonl"]}}
    with pytest.raises(ConfigError, match=why):
        load_lm_sections({**base, "tools": [_tool_files(tmp_path, world_dir, entry)]})


def test_the_dry_run_says_which_isolation_holds_and_refuses_bad_limits(
    world_dir: Path, model_dir: Path, tmp_path: Path, host: Any, invoke: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    from rlinf_algos.tools import sandbox

    config = {
        "algorithm": {"name": "grpo_lm", "group_size": 2, "kl_coef": 0.0},
        "model": {"path": str(model_dir)},
        "data": {"train_files": [str(world_dir / "train.jsonl")]},
        "reward": {"name": "exact_match", "kwargs": {"normalize": True, "pattern": ANSWER_PATTERN}},
        "runner": {"scheduler": "local"},
        "tools": [{"name": "python", "timeout_s": 20}],
    }
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(config))
    if sandbox.isolation_problem("bwrap") is None:
        res = invoke(host, "train", str(path), "--dry-run")
        assert res.exit_code == 0, (res.output, res.exception)
        assert "# tools[0] python sandbox: bwrap: bubblewrap PID, mount" in res.output
    res = invoke(host, "train", str(path), "--dry-run", "tools.0.kwargs={memory_mb: -1, wall_s: .nan}")
    assert isinstance(res.exception, ConfigError), (res.output, res.exception)
    assert "tools[0].kwargs.memory_mb" in str(res.exception) and "tools[0].kwargs.wall_s" in str(
        res.exception
    )
    # without bubblewrap: refused unless a weaker isolation is named, and the dry run says which holds
    monkeypatch.setenv("PATH", str(tmp_path))
    sandbox._bwrap_problem.cache_clear()
    try:
        res = invoke(host, "train", str(path), "--dry-run")
        assert isinstance(res.exception, ConfigError), (res.output, res.exception)
        assert "tools[0].kwargs.isolation" in str(res.exception) and "bubblewrap" in str(res.exception)
        res = invoke(host, "train", str(path), "--dry-run", "tools.0.kwargs={isolation: rlimits-only}")
        assert res.exit_code == 0, (res.output, res.exception)
        assert "# tools[0] python sandbox: rlimits-only (weakest, opted in)" in res.output
    finally:
        monkeypatch.undo()
        sandbox._bwrap_problem.cache_clear()
        sandbox.network_isolation.cache_clear()


def test_teacher_trace_shape() -> None:
    world = make_world(1, **SIZES)
    q = world.train[0]
    careful = teacher_trace(q, lambda query: f"[d0] about {query}")
    careless = teacher_trace(q, lambda query: f"[d0] about {query}", slip=True)
    assert [m["role"] for m in careful] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert answer_matches(careful[-1]["content"], q.answer) and careful[-1]["content"].endswith(
        f" {q.answer}."
    )
    assert not answer_matches(careless[-1]["content"], q.answer)
    assert careful[1]["tool_calls"][0]["function"]["arguments"] == {"query": q.queries[0]}
    assert careful[3]["tool_calls"][0]["function"]["arguments"] == {"query": q.queries[1]}
    assert q.company in q.queries[0] and q.bridge in q.queries[1]
    # the verifier reads the answer sentence, normalised; nothing else scores
    assert answer_matches("So the answer is the  kesh!", "Kesh") and not answer_matches("Kesh", "Kesh")


# -- placed agents and tools (issue 40, item 3) -------------------------------------------------


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.extended  # 120 s on CI's 2 cores; the in-process tools runs are in CI
def test_tools_episodes_on_placed_agents_and_a_tool_component(
    world_dir: Path, model_dir: Path, tmp_path: Path
) -> None:
    """The seed's agent placement at a scaled-down size, on a real embedded Ray: four agent
    processes play the tools task's episodes, one tool process serves the search index, for one
    GRPO iteration; the tool process killed in the run is restarted in place; its figures have the same names as a run whose driver plays the episodes and
    runs the tools itself."""
    from rlinf_algos.training import run_training
    from rlinf_scheduler.runtime.cluster import Cluster

    def config(placement: dict[str, Any]) -> dict[str, Any]:
        return {
            "cluster": {"num_nodes": 1, "component_placement": placement},
            "algorithm": {
                "name": "grpo_lm", "group_size": 2, "prompts_per_iter": 4, "iterations": 1,
                "max_new_tokens": 12, "max_turns": 2, "max_response_tokens": 64,
                "minibatch_size": 8, "kl_coef": 0.0,
            },
            "model": {"path": str(model_dir)},
            "data": {
                "train_files": [str(world_dir / "train.jsonl")],
                "val_files": [str(world_dir / "val.jsonl")],
                "max_samples": 2,
            },
            "reward": {"name": "exact_match", "kwargs": {"normalize": True, "pattern": ANSWER_PATTERN}},
            "tools": [_search_entry(world_dir)],
            "runner": {
                "scheduler": "ray", "loggers": ["csv"], "checkpoint_interval": 0, "worker_timeout": 120,
            },
        }  # fmt: skip

    base = {c: {"node_group": "node", "placement": "0"} for c in ("actor", "rollout", "reward")}
    placed = {
        **base,
        "agent": {"node_group": "node", "placement": "0:0-3"},
        "tool": {"node_group": "node", "placement": "0"},
    }
    import os
    import signal

    killed: list[int] = []

    def on_generating(comps: Any, it: int, report: dict[str, Any]) -> None:
        # iteration 1 has started on the workers: the tool process dies inside it
        if it == 1 and not killed:
            killed.append(comps.pids["tool"][0])
            os.kill(killed[0], signal.SIGKILL)

    rows = {}
    cluster = Cluster(1, ray_init={"num_cpus": 2})
    try:
        summary = run_training(
            config(placed), run_dir=tmp_path / "placed", callbacks={"on_generating": on_generating}
        )
    finally:
        cluster.shutdown()
    assert summary["mode"] == "tools" and summary["iterations"] == 1
    assert summary["placement"]["agent"]["processes"] == 4
    assert summary["placement"]["tool"]["processes"] == 1
    # the dead tool process was named and restarted in place (in the iteration, its batch dropped
    # and played again, or in the evaluation after it when the iteration ended first: its episodes
    # make no tool call), and the run went on to its end
    events = "\n".join(summary["events"])
    assert killed and f"tool rank 0, pid {killed[0]} failed in serve()" in events, events
    assert "restarted tool rank(s) [0]" in events and summary["restarts"] == 1, events
    assert summary["dropped_batches"] in (0, 1) and summary["learner_restarts"] == []
    assert (tmp_path / "placed" / "policy" / "config.json").is_file()
    # the same run with the driver playing the episodes and running the tools, in process
    local = config(base)
    local["runner"]["scheduler"] = "local"
    del local["cluster"]
    run_training(local, run_dir=tmp_path / "driver")
    for name in ("placed", "driver"):
        (rows[name],) = [
            json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        ]
    figures = {"turns", "answer_rate", "tool_calls", "tool_calls/search", "tool_errors", "tool_timeouts"}
    figures |= {"tool_malformed", "tool_unknown", "tool_latency_mean_s", "success"}
    assert figures <= set(rows["placed"])
    episode_keys = {k for k in rows["driver"] if k in figures or k.startswith("tool")}
    assert episode_keys == {k for k in rows["placed"] if k in figures or k.startswith("tool")}
    assert rows["placed"]["sequences"] == rows["driver"]["sequences"] == 8
    assert 1.0 <= rows["placed"]["turns"] <= 2.0


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.extended  # eight Ray processes, four restarts: 3-4 minutes on CI's 2 cores
def test_a_tools_run_survives_killed_tool_reward_reference_and_agent_processes(
    world_dir: Path, model_dir: Path, tmp_path: Path
) -> None:
    """SIGKILL, one per iteration, on the tool, reward, reference and agent process of a placed
    tools run (issue 53 item 4): each death is named (role, rank, pid), the process restarted in
    place, its batch dropped and played again, and the run ends with every row once, its policy
    and summary written, well within ``runner.worker_timeout`` (no wait on a dead agent)."""
    import os
    import signal
    import time

    from rlinf_algos.training import run_training
    from rlinf_scheduler.runtime.cluster import Cluster

    placement = {c: {"node_group": "node", "placement": "0"} for c in ("actor", "rollout", "reward", "tool")}
    placement |= {"reference": {"node_group": "node", "placement": "0"},
                  "agent": {"node_group": "node", "placement": "0:0-1"}}  # fmt: skip
    config = {
        "cluster": {"num_nodes": 1, "component_placement": placement},
        "algorithm": {
            "name": "grpo_lm", "group_size": 2, "prompts_per_iter": 2, "iterations": 4,
            "max_new_tokens": 12, "max_turns": 2, "max_response_tokens": 64,
            "minibatch_size": 4, "kl_coef": 0.05,
        },
        "model": {"path": str(model_dir)},
        "data": {"train_files": [str(world_dir / "train.jsonl")], "val_files": [str(world_dir / "val.jsonl")],
                 "max_samples": 2},
        "reward": {"name": "exact_match", "kwargs": {"normalize": True, "pattern": ANSWER_PATTERN}},
        "tools": [_search_entry(world_dir)],
        "runner": {"scheduler": "ray", "loggers": ["csv"], "checkpoint_interval": 0, "worker_timeout": 600,
                   "eval_interval": 0},
    }  # fmt: skip
    victims = {1: "tool", 2: "reward", 3: "reference", 4: "agent"}
    killed: list[tuple[str, int]] = []

    def on_generating(comps: Any, it: int, report: dict[str, Any]) -> None:
        if it in victims and len(killed) < it:
            role = victims[it]
            killed.append((role, comps.pids[role][0]))
            os.kill(killed[-1][1], signal.SIGKILL)

    cluster = Cluster(1, ray_init={"num_cpus": 2})
    t0 = time.monotonic()
    try:
        summary = run_training(config, run_dir=tmp_path, callbacks={"on_generating": on_generating})
    finally:
        cluster.shutdown()
    assert time.monotonic() - t0 < 400  # far below worker_timeout + the run: nothing waited on the dead
    assert [r for r, _ in killed] == ["tool", "reward", "reference", "agent"]
    events = "\n".join(summary["events"])
    for role, pid in killed:
        assert f"{role} rank 0, pid {pid} failed" in events, events
        assert f"restarted {role} rank(s) [0]" in events, events
    assert summary["restarts"] == 4 and summary["iterations"] == 4 and summary["learner_restarts"] == []
    assert summary["dropped_batches"] >= 3, events  # the tool's may die between calls
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]  # each row once
    assert (tmp_path / "policy" / "config.json").is_file() and (tmp_path / "summary.json").is_file()


def test_episodes_with_placed_tools_are_the_in_process_ones(
    world_dir: Path, model_dir: Path, tool_server: Any
) -> None:
    """The same policy plays the same episodes, token for token and figure for figure (but the
    latency), whether its tools run in the agent's process or on a tool server it reaches over a
    channel (:mod:`rlinf_algos.tools.placed`)."""
    run = _run(world_dir, model_dir, [_search_entry(world_dir)], max_turns=3)
    task = make_task(run, task_tokenizer(run))
    agent = ToolAgent(task, task.tok, 64, 1024)
    calls = [
        '<tool_call>\n{"name": "search", "arguments": {"query": "founder"}}\n</tool_call>',
        '<tool_call>\n{"name": "search", "arguments": {"query": 3}}\n</tool_call><tool_call>{bad',
        "So the answer is Kesh.",
    ]
    problems = task.heldout()[:2]
    here = agent.run(problems, 2, Scripted(task.chat, calls))

    with tool_server(run.tools.entries) as (client, server):
        there = agent.run(problems, 2, Scripted(task.chat, calls), tools=client)
    assert there.sequences == here.sequences and there.loss_masks == here.loss_masks
    assert there.final_responses == here.final_responses and there.failures == here.failures
    drop = "tool_latency_s"
    assert [{k: v for k, v in m.items() if k != drop} for m in there.metrics] == [
        {k: v for k, v in m.items() if k != drop} for m in here.metrics
    ]
    # every call that parsed ran on the server (once); the unparsable block was answered here
    searched = sum(m["tool_calls/search"] for m in there.metrics)
    assert searched >= 4 and server.box.stats.calls["search"] == searched
    assert episode_metrics(there)["tool_malformed"] >= 2 and server.box.stats.malformed < searched


def test_the_seeds_agent_placement_plans_as_written_with_a_tool_component(
    world_dir: Path, model_dir: Path, tmp_path: Path, host: Any, invoke: Any
) -> None:
    """Seed 002's ``agent: {node_group: node, placement: "0-1:0-199,2-3:200-399"}`` beside a tool
    component on the CPU nodes: ``rlinf train --dry-run`` on a 4-node CPU inventory shows 400 agent
    processes, 100 per node, and the tool processes where they were put; a tool component
    without a tools section is refused naming its YAML path."""
    import yaml

    config = {
        "cluster": {
            "num_nodes": 4,
            "component_placement": {
                "actor": {"node_group": "node", "placement": "0"},
                "rollout": {"node_group": "node", "placement": "0"},
                "reward": {"node_group": "node", "placement": "1"},
                "agent": {"node_group": "node", "placement": "0-1:0-199,2-3:200-399"},
                "tool": {"node_group": "node", "placement": "2-3:0-3"},
            },
        },
        "algorithm": {"name": "grpo_lm", "group_size": 2, "kl_coef": 0.0},
        "model": {"path": str(model_dir)},
        "data": {"train_files": [str(world_dir / "train.jsonl")]},
        "reward": {"name": "exact_match", "kwargs": {"normalize": True, "pattern": ANSWER_PATTERN}},
        "tools": [_search_entry(world_dir)],
    }
    (tmp_path / "grpo.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "inv.yaml").write_text("nodes:\n  - node_ranks: 0-3\n    gpus: 0\n")
    res = invoke(
        host, "train", str(tmp_path / "grpo.yaml"), "--dry-run", "--inventory", str(tmp_path / "inv.yaml")
    )
    assert res.exit_code == 0, (res.output, res.exception)
    assert "agent: 400 processes on nodes 0-3" in res.output, res.output
    assert "tool: 4 processes on nodes 2-3" in res.output, res.output
    assert "nothing was started" in res.output
    from collections import Counter

    from rlinf_scheduler.placement import Inventory, plan_placement

    plan = plan_placement(
        config["cluster"], Inventory.from_data({"nodes": [{"node_ranks": "0-3", "gpus": 0}]}, 4)
    )
    assert Counter(p.node_rank for p in plan["agent"]) == {0: 100, 1: 100, 2: 100, 3: 100}
    assert [p.node_rank for p in plan["tool"]] == [2, 2, 3, 3]
    assert all(not p.visible_accelerators for p in [*plan["agent"], *plan["tool"]])
    del config["tools"]
    (tmp_path / "grpo.yaml").write_text(yaml.safe_dump(config))
    res = invoke(
        host, "train", str(tmp_path / "grpo.yaml"), "--dry-run", "--inventory", str(tmp_path / "inv.yaml")
    )
    assert isinstance(res.exception, ConfigError), (res.output, res.exception)
    assert "cluster.component_placement.tool: a `tool` component serves the run's tools" in str(res.exception)
