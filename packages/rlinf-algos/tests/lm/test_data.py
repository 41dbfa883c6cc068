"""Prompt data sets (rlinf_algos.lm.data): RLinf JSONL and verl parquet load unchanged, chat
templates, max_prompt_length filtering, every data error naming its YAML key, file and row, and
reproducible prompt batches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlinf_algos.lm.data import DataConfig, PromptDataset, Sample, load_dataset, lookup
from rlinf_core.config import validate_model
from rlinf_core.errors import ConfigError, RlinfError

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WORDS = "what is two plus three four five the answer system you are a helpful solver user assistant"


def make_tokenizer(chat_template: str | None = TEMPLATE) -> Any:
    """A word-level tokenizer trained here (no downloads), with the chat markers as special tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=["<unk>", "<|im_start|>", "<|im_end|>", "<eos>"])
    tok.train_from_iterator([WORDS], trainer=trainer)
    kwargs = {"chat_template": chat_template} if chat_template is not None else {}
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>", **kwargs)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return make_tokenizer()


def write_jsonl(path: Path, rows: list[Any], blank_after: int | None = None) -> Path:
    lines = [json.dumps(r) for r in rows]
    if blank_after is not None:
        lines.insert(blank_after, "")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def verl_rows() -> list[dict[str, Any]]:
    return [
        {
            "data_source": "openai/gsm8k",
            "prompt": [
                {"role": "system", "content": "you are a helpful solver"},
                {"role": "user", "content": f"what is two plus {n}"},
            ],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(2 + i)},
            "extra_info": {"split": "train", "index": i},
        }
        for i, n in enumerate(["three", "four", "five"])
    ]


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def cfg(**kw: Any) -> DataConfig:
    return validate_model(DataConfig, kw, "data")


# -- formats ------------------------------------------------------------------------------------


def test_rlinf_jsonl_loads_unchanged_without_a_tokenizer(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "train.jsonl",
        [{"prompt": "48+317=", "answer": 365, "id": 1}, {"prompt": "1+2=", "answer": "3", "id": 2}],
        blank_after=1,
    )
    ds = load_dataset(cfg(train_files="train.jsonl"), "train", root=tmp_path)
    assert isinstance(ds, PromptDataset) and len(ds) == 2 and ds.rows == 2 and ds.filtered == 0
    first, second = ds
    assert isinstance(first, Sample)
    assert first.prompt_text == "48+317=" and first.messages is None
    assert first.answer == "365" and first.ground_truth == 365
    assert first.columns == {"answer": 365, "id": 1}
    assert first.source == f"{path}:1" and second.source == f"{path}:3"  # line 2 is blank


def test_verl_parquet_loads_unchanged_with_the_chat_template(tmp_path: Path, tokenizer: Any) -> None:
    path = write_parquet(tmp_path / "train.parquet", verl_rows())
    ds = load_dataset(cfg(train_files=[str(path)]), "train", tokenizer)
    assert [s.answer for s in ds] == ["2", "3", "4"]
    s = ds[1]
    assert s.source == f"{path}:1"
    assert s.messages is not None and s.messages[1] == {"role": "user", "content": "what is two plus four"}
    assert s.prompt_text == tokenizer.apply_chat_template(
        s.messages, tokenize=False, add_generation_prompt=True
    )
    assert s.prompt_text.endswith("<|im_start|>assistant\n")
    assert set(s.columns) == {"data_source", "ability", "reward_model", "extra_info"}
    assert s.columns["extra_info"] == {"split": "train", "index": 1}
    assert s.ground_truth == "3"


def test_several_files_in_order_max_samples_and_splits(tmp_path: Path, tokenizer: Any) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"prompt": "p1", "answer": "1"}, {"prompt": "p2", "answer": "2"}])
    write_parquet(tmp_path / "b.parquet", [{"prompt": "p3", "answer": "3"}, {"prompt": "p4", "answer": "4"}])
    (tmp_path / "c.json").write_text(json.dumps([{"prompt": "v1", "answer": "9"}]), encoding="utf-8")
    c = cfg(train_files=["a.jsonl", "b.parquet"], val_files="c.json")
    train = load_dataset(c, "train", tokenizer, root=tmp_path)
    assert [s.prompt_text for s in train] == ["p1", "p2", "p3", "p4"]
    assert [s.source.rsplit("/", 1)[1] for s in train] == [
        "a.jsonl:1",
        "a.jsonl:2",
        "b.parquet:0",
        "b.parquet:1",
    ]
    val = load_dataset(c, "val", tokenizer, root=tmp_path)
    assert [(s.prompt_text, s.answer) for s in val] == [("v1", "9")]
    capped = load_dataset(cfg(train_files=["a.jsonl", "b.parquet"], max_samples=3), "train", root=tmp_path)
    assert [s.answer for s in capped] == ["1", "2", "3"] and capped.rows == 3
    assert len(load_dataset(cfg(train_files="a.jsonl"), "val", root=tmp_path)) == 0  # no val_files


def test_nested_and_default_answer_keys(tmp_path: Path) -> None:
    write_jsonl(
        tmp_path / "d.jsonl",
        [
            {"prompt": "a", "meta": {"solution": {"final": "42"}}, "answer": "no"},
            {"prompt": "b", "meta": {"solution": {"final": [1, 2]}}},
        ],
    )
    ds = load_dataset(cfg(train_files="d.jsonl", answer_key="meta.solution.final"), "train", root=tmp_path)
    assert [s.answer for s in ds] == ["42", "[1, 2]"] and ds[1].ground_truth == [1, 2]
    # default: reward_model.ground_truth where a row has it, else answer
    write_jsonl(
        tmp_path / "m.jsonl",
        [
            {"prompt": "a", "reward_model": {"ground_truth": "7"}, "answer": "x"},
            {"prompt": "b", "answer": "8"},
        ],
    )
    assert [s.answer for s in load_dataset(cfg(train_files="m.jsonl"), root=tmp_path)] == ["7", "8"]
    assert lookup({"a.b": 1, "a": {"b": 2}}, "a.b") == 1 and lookup({"a": {}}, "a.b", "none") == "none"


def test_chat_template_modes(tmp_path: Path, tokenizer: Any) -> None:
    write_jsonl(tmp_path / "s.jsonl", [{"prompt": "what is two plus three", "answer": "5"}])
    ds = load_dataset(cfg(train_files="s.jsonl", apply_chat_template=True), "train", tokenizer, root=tmp_path)
    assert ds[0].messages == [{"role": "user", "content": "what is two plus three"}]
    assert ds[0].prompt_text == "<|im_start|>user\nwhat is two plus three<|im_end|>\n<|im_start|>assistant\n"
    # messages with the template turned off: the contents, joined by blank lines
    write_parquet(tmp_path / "v.parquet", verl_rows()[:1])
    raw = load_dataset(cfg(train_files="v.parquet", apply_chat_template=False), root=tmp_path)
    assert raw[0].prompt_text == "you are a helpful solver\n\nwhat is two plus three"
    assert raw[0].messages is not None


@pytest.mark.parametrize("explicit", [True, False])
def test_no_chat_template_is_an_error_naming_the_key(tmp_path: Path, explicit: bool) -> None:
    bare = make_tokenizer(chat_template=None)
    assert bare.chat_template is None
    if explicit:
        write_jsonl(tmp_path / "t.jsonl", [{"prompt": "hi", "answer": "1"}])
        c = cfg(train_files="t.jsonl", apply_chat_template=True)
    else:
        write_parquet(tmp_path / "t.parquet", verl_rows())
        c = cfg(train_files="t.parquet")
    with pytest.raises(ConfigError) as info:
        load_dataset(c, "train", bare, root=tmp_path)
    (problem,) = info.value.problems
    assert problem.path == "data.apply_chat_template"
    assert "no chat template" in problem.message and "data.apply_chat_template: false" in problem.message
    assert str(tmp_path) in problem.message


def test_max_prompt_length_filters_and_counts(tmp_path: Path, tokenizer: Any) -> None:
    rows = [{"prompt": " ".join(["two"] * n), "answer": str(n)} for n in (3, 8, 4, 12)]
    path = write_jsonl(tmp_path / "l.jsonl", rows)
    ds = load_dataset(cfg(train_files="l.jsonl", max_prompt_length=5), "train", tokenizer, root=tmp_path)
    assert [s.answer for s in ds] == ["3", "4"]
    assert ds.rows == 4 and ds.filtered == 2
    assert ds.filter_reasons == {"longer than data.max_prompt_length=5 tokens": 2}
    assert ds.filtered_sources == [f"{path}:2", f"{path}:4"]
    # templated prompts are counted with their markers: 4 words + 7 template tokens
    templ = load_dataset(
        cfg(train_files="l.jsonl", max_prompt_length=11, apply_chat_template=True),
        "train",
        tokenizer,
        root=tmp_path,
    )
    assert [s.answer for s in templ] == ["3", "4"]
    with pytest.raises(ConfigError) as info:
        load_dataset(cfg(train_files="l.jsonl", max_prompt_length=2), "train", tokenizer, root=tmp_path)
    assert info.value.problems[0].path == "data.max_prompt_length"
    assert "every one of the 4 prompts" in str(info.value) and "shortest has 3" in str(info.value)
    with pytest.raises(RlinfError, match="tokenizer"):
        load_dataset(cfg(train_files="l.jsonl", max_prompt_length=5), "train", None, root=tmp_path)


# -- errors: the YAML key, the file and the row -------------------------------------------------


def _error(tmp_path: Path, name: str, content: str | bytes | None, **kw: Any) -> tuple[str, str]:
    if content is not None:
        p = tmp_path / name
        p.write_bytes(content) if isinstance(content, bytes) else p.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_dataset(cfg(train_files=name, **kw), "train", root=tmp_path)
    (problem,) = info.value.problems
    return problem.path, problem.message


GOOD = json.dumps({"prompt": "p", "answer": "1"})


@pytest.mark.parametrize(
    ("name", "content", "kw", "key", "where", "words"),
    [
        ("gone.jsonl", None, {}, "data.train_files", "gone.jsonl", "file not found"),
        ("bad.jsonl", GOOD + "\n{not json\n", {}, "data.train_files", "bad.jsonl:2", "invalid JSON"),
        ("arr.jsonl", GOOD + "\n[1, 2]\n", {}, "data.train_files", "arr.jsonl:2", "must be a JSON object"),
        (
            "bad.parquet",
            b"PAR1 this is not parquet",
            {},
            "data.train_files",
            "bad.parquet",
            "cannot read parquet",
        ),
        ("empty.jsonl", "\n\n", {}, "data.train_files", "empty.jsonl", "no rows"),
        (
            "np.jsonl",
            GOOD + "\n" + json.dumps({"question": "q", "answer": "1"}),
            {},
            "data.prompt_key",
            "np.jsonl:2",
            "no 'prompt' in this row (it has question, answer)",
        ),
        (
            "na.jsonl",
            json.dumps({"prompt": "p", "solution": "1"}),
            {},
            "data.answer_key",
            "na.jsonl:1",
            "no 'reward_model.ground_truth' or 'answer'",
        ),
        (
            "nk.jsonl",
            json.dumps({"prompt": "p", "meta": {"x": 1}}),
            {"answer_key": "meta.final"},
            "data.answer_key",
            "nk.jsonl:1",
            "no 'meta.final' in this row (it has prompt, meta, meta.x)",
        ),
        (
            "null.jsonl",
            json.dumps({"prompt": "p", "answer": None}),
            {},
            "data.answer_key",
            "null.jsonl:1",
            "null",
        ),
        (
            "int.jsonl",
            json.dumps({"prompt": 3, "answer": "1"}),
            {},
            "data.prompt_key",
            "int.jsonl:1",
            "got 3",
        ),
        (
            "msg.jsonl",
            json.dumps({"prompt": [{"role": "user"}], "answer": "1"}),
            {},
            "data.prompt_key",
            "msg.jsonl:1",
            "list of chat messages {role, content}",
        ),
    ],
)
def test_every_data_error_names_key_file_and_row(
    tmp_path: Path, name: str, content: Any, kw: dict[str, Any], key: str, where: str, words: str
) -> None:
    path, message = _error(tmp_path, name, content, **kw)
    assert path == key
    assert f"{tmp_path}/{where}" in message
    assert words in message


def test_errors_in_a_second_file_name_its_list_index(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"prompt": "p", "answer": "1"}])
    with pytest.raises(ConfigError) as info:
        load_dataset(cfg(train_files=["a.jsonl", "b.jsonl"]), root=tmp_path)
    assert info.value.problems[0].path == "data.train_files[1]"
    assert str(tmp_path / "b.jsonl") in str(info.value)


def test_parquet_row_errors_name_the_row_index(tmp_path: Path) -> None:
    rows = verl_rows()
    rows[2]["prompt"] = []
    path = write_parquet(tmp_path / "v.parquet", rows)
    with pytest.raises(ConfigError, match=rf"{path}:2: the prompt \('prompt'\) must be"):
        load_dataset(cfg(train_files="v.parquet", apply_chat_template=False), root=tmp_path)


@pytest.mark.parametrize(
    ("raw", "path", "words"),
    [
        ({}, "data.train_files", "Field required"),
        ({"train_files": "x.csv"}, "data.train_files", "unknown file type"),
        ({"train_files": "x.jsonl", "prompt_keys": "q"}, "data.prompt_keys", "unknown key"),
        ({"train_files": "x.jsonl", "max_prompt_length": True}, "data.max_prompt_length", "valid integer"),
        (
            {"train_files": "x.jsonl", "max_prompt_length": 0},
            "data.max_prompt_length",
            "greater than or equal",
        ),
        ({"train_files": "x.jsonl", "seed": False}, "data.seed", "valid integer"),
        ({"train_files": "x.jsonl", "max_samples": 2.5}, "data.max_samples", "valid integer"),
        (
            {"train_files": "x.jsonl", "apply_chat_template": "yes"},
            "data.apply_chat_template",
            "valid boolean",
        ),
        ({"train_files": "x.jsonl", "shuffle": 1}, "data.shuffle", "valid boolean"),
    ],
)
def test_config_rejects_bad_values_with_yaml_paths(raw: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        cfg(**raw)
    assert info.value.problems[0].path == path
    assert words in info.value.problems[0].message


# -- batches ------------------------------------------------------------------------------------


def _ds(tmp_path: Path, n: int = 5, **kw: Any) -> PromptDataset:
    write_jsonl(tmp_path / "b.jsonl", [{"prompt": f"p{i}", "answer": str(i)} for i in range(n)])
    return load_dataset(cfg(train_files="b.jsonl", **kw), root=tmp_path)


def _take(ds: PromptDataset, n: int, k: int, **kw: Any) -> list[list[str]]:
    it = ds.batches(n, **kw)
    return [[s.answer for s in next(it)] for _ in range(k)]


def test_batches_are_reproducible_epochs_and_resumable(tmp_path: Path) -> None:
    ds = _ds(tmp_path, seed=3)
    batches = _take(ds, 2, 10)  # 20 draws = 4 epochs of 5
    assert batches == _take(ds, 2, 10)
    assert batches != _take(ds, 2, 10, seed=4)
    flat = [a for b in batches for a in b]
    for e in range(4):
        assert sorted(flat[5 * e : 5 * e + 5]) == ["0", "1", "2", "3", "4"]
        assert [ds[i].answer for i in ds.epoch_order(e)] == flat[5 * e : 5 * e + 5]
    assert flat[:5] != flat[5:10] or flat[5:10] != flat[10:15]  # epochs are reshuffled
    assert _take(ds, 2, 4, start=6) == batches[6:10]
    assert all(len(b) == 2 for b in batches)
    assert _take(ds, 7, 1) == [flat[:7]]  # larger than the data set: runs into the next epoch


def test_batches_in_file_order_without_shuffle(tmp_path: Path) -> None:
    ds = _ds(tmp_path, 3, shuffle=False)
    assert _take(ds, 2, 3) == [["0", "1"], ["2", "0"], ["1", "2"]]
    with pytest.raises(RlinfError, match="at least 1"):
        next(ds.batches(0))
    empty = PromptDataset([], "val", [])
    with pytest.raises(RlinfError, match="val data set is empty"):
        next(empty.batches(1))
