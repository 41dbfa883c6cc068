"""TRL's conversational data sets load as TRL loads them (issue 53, item 8): a ``messages``
column of chat messages (``trl.data_utils.is_conversational``) is taken as the conversation
without ``data.messages_key``, a ``tools`` column as each row's tool schemas without
``data.tools_key``; an explicit key still names any other column, and prompt-response rows are
left alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlinf_algos.lm.finetune import load_sft_config, train_sft

LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
    },
}


def conversation(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"What is {i} + 1?"},
        {"role": "assistant", "content": f"{i + 1}"},
    ]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def sft_config(train: Path, **data: Any) -> dict[str, Any]:
    return {
        "model": {
            "init": {
                "hidden_size": 16,
                "num_layers": 1,
                "num_heads": 2,
                "tokenizer": "bpe",
                "vocab_size": 300,
                "max_position_embeddings": 512,
            }
        },
        "data": {"train_files": [str(train)], **data},
        "train": {"steps": 1, "batch_size": 2, "eval_generate": 0, "max_length": 512},
        "runner": {"log_interval": 1, "loggers": ["csv"]},
    }


@pytest.mark.parametrize("form", ["jsonl", "parquet"])
def test_the_messages_and_tools_columns_are_detected(tmp_path: Path, form: str) -> None:
    rows = [{"messages": conversation(i), "tools": [LOOKUP]} for i in range(4)]
    write = write_jsonl if form == "jsonl" else write_parquet
    train = write(tmp_path / f"train.{form}", rows)
    run = load_sft_config(sft_config(train))
    assert (run.data.messages_key, run.data.tools_key) == ("messages", "tools")
    # without tools, only the conversations
    plain = write(tmp_path / f"plain.{form}", [{"messages": conversation(i)} for i in range(4)])
    run = load_sft_config(sft_config(plain))
    assert (run.data.messages_key, run.data.tools_key) == ("messages", None)


@pytest.mark.slow  # builds a model and trains a step: about 30 s on the 2-core machine
def test_rlinf_sft_trains_on_a_trl_dataset_as_it_is(tmp_path: Path) -> None:
    train = write_parquet(
        tmp_path / "train.parquet", [{"messages": conversation(i), "tools": [LOOKUP]} for i in range(4)]
    )
    res = train_sft(load_sft_config(sft_config(train)), tmp_path / "run", log=None)
    assert res.summary["steps"] == 1 and res.summary["train_examples"] == 4
    assert (tmp_path / "run" / "policy" / "config.json").is_file()


def test_explicit_keys_and_prompt_response_rows_are_kept(tmp_path: Path) -> None:
    other = write_jsonl(tmp_path / "other.jsonl", [{"dialogue": conversation(i)} for i in range(2)])
    run = load_sft_config(sft_config(other, messages_key="dialogue"))
    assert (run.data.messages_key, run.data.tools_key) == ("dialogue", None)
    # a row with a response column is a prompt-response row, even beside a messages column
    pr = write_jsonl(
        tmp_path / "pr.jsonl",
        [{"prompt": "1 + 1?", "response": "2", "messages": conversation(1)}],
    )
    run = load_sft_config(sft_config(pr))
    assert run.data.messages_key is None
    # rows whose messages are not chat messages are not conversations
    texts = write_jsonl(tmp_path / "texts.jsonl", [{"prompt": "p", "response": "r", "messages": ["a", "b"]}])
    assert load_sft_config(sft_config(texts, response_key=None)).data.messages_key is None
    # the explicit messages key with TRL's tools column: the tools are the row's
    tooled = write_jsonl(tmp_path / "tooled.jsonl", [{"dialogue": conversation(1), "tools": [LOOKUP]}])
    run = load_sft_config(sft_config(tooled, messages_key="dialogue"))
    assert run.data.tools_key == "tools"
    # a missing file is not guessed about: its own check names it later
    run = load_sft_config(sft_config(tmp_path / "missing.jsonl"))
    assert run.data.messages_key is None
