"""The arithmetic task, multi-agent mode included, on a model folder whose tokenizer was not made
for it (a byte-level BPE tokenizer with Qwen's ChatML tokens, trained here): the task's markers
are added as special tokens into ``RUN_DIR/base_model`` and the task's ``<bos>``/``<eos>``
become the tokenizer's own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from rlinf_algos.lm import hf
from rlinf_algos.lm.arith import Problem, sft_example, verify_chain
from rlinf_algos.lm.config import LMModelConfig, ModelInitConfig, load_lm_sections
from rlinf_algos.lm.flow import train_lm
from rlinf_algos.lm.tokens import ARITH_MARKERS, LMTokenizer

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
CORPUS = [f"What is {a}+{b}? The answer is {a + b}." for a in range(0, 100, 7) for b in range(0, 100, 3)]


def _folder(path: Path, architecture: str = "qwen2") -> Path:
    init = ModelInitConfig(
        architecture=architecture,
        hidden_size=16,
        num_layers=1,
        num_heads=2,
        max_position_embeddings=256,
        tokenizer="bpe",
        vocab_size=300,
    )
    return hf.new_model_folder(path, init, seed=0, corpus=CORPUS)


@pytest.mark.parametrize("architecture", ["qwen2", "llama"])
def test_markers_are_added_as_special_tokens(architecture: str, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = _folder(tmp_path / "user", architecture)
    before = AutoModelForCausalLM.from_pretrained(str(src)).get_input_embeddings().weight.detach().clone()
    spec = LMModelConfig(path=str(src))
    added = hf.add_tokens_folder(spec, tmp_path / "base_model", ARITH_MARKERS, seed=0)
    assert added == list(ARITH_MARKERS)
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "base_model"))
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "base_model"))
    ids = tok.convert_tokens_to_ids(list(ARITH_MARKERS))
    assert ids == list(range(len(before), len(before) + 4))
    for marker, tid in zip(ARITH_MARKERS, ids, strict=True):
        assert tok.encode(f"12{marker}3", add_special_tokens=False).count(tid) == 1
    w = model.get_input_embeddings().weight.detach()
    assert w.shape[0] == len(tok) == model.config.vocab_size
    assert torch.equal(w[: len(before)], before)  # the user's rows are untouched
    new = w[ids]
    assert torch.cdist(new, new).triu(1)[torch.ones(4, 4).triu(1).bool()].min() > 0  # distinct
    assert (new.mean(0) - before.mean(0)).abs().max() < before.std(0).max()  # around the mean
    # a folder that has them already is used as it is: nothing is written
    assert (
        hf.add_tokens_folder(
            LMModelConfig(path=str(tmp_path / "base_model")), tmp_path / "again", ARITH_MARKERS
        )
        == []
    )
    assert not (tmp_path / "again").exists()


def test_padded_vocabulary_keeps_its_size(tmp_path: Path) -> None:
    """Qwen pads its embedding table beyond the tokenizer: the new tokens take padding rows."""
    from transformers import AutoModelForCausalLM

    src = _folder(tmp_path / "user")
    model = AutoModelForCausalLM.from_pretrained(str(src))
    rows = model.config.vocab_size
    model.resize_token_embeddings(rows + 64)
    model.save_pretrained(str(src))
    hf.add_tokens_folder(LMModelConfig(path=str(src)), tmp_path / "base_model", ARITH_MARKERS)
    out = AutoModelForCausalLM.from_pretrained(str(tmp_path / "base_model"))
    assert out.config.vocab_size == rows + 64
    tok = LMTokenizer.from_folder(tmp_path / "base_model")
    assert [tok.token_id(m) for m in ARITH_MARKERS] == list(range(rows, rows + 4))


def test_arith_view_maps_the_sequence_ends(tmp_path: Path) -> None:
    src = _folder(tmp_path / "user")
    hf.add_tokens_folder(LMModelConfig(path=str(src)), tmp_path / "base_model", ARITH_MARKERS)
    plain = LMTokenizer.from_folder(tmp_path / "base_model")
    tok = plain.arith_view()
    assert plain.bos_id is None and plain.decode([plain.eos_id]) == "<|im_end|>"
    (_kind, segments), *_ = sft_example(Problem(((12, 34, 5),)), "single", 4)
    prompt, chain = segments[0][0], segments[1][0]
    assert prompt.startswith("<bos>") and chain.endswith("<eos>")
    ids = tok.encode(chain)
    assert ids[-1] == tok.eos_id and ids.count(tok.token_id("<step>")) == 2
    assert tok.encode(prompt) == plain.encode(prompt.removeprefix("<bos>"))  # no bos token here
    assert tok.decode(ids) == chain
    assert verify_chain(tok.decode(ids), 51).correct
    assert not verify_chain(plain.decode(ids), 51).well_formed  # without the view: no <eos>
    arith = LMTokenizer.arith()
    assert arith.arith_view().encode(chain) == arith.encode(chain)


def test_multiagent_example_on_a_user_folder(tmp_path: Path, tiny_lm: Any) -> None:
    """One iteration of grpo_multiagent.yaml from a folder with a ChatML BPE tokenizer: the warm
    start, the lead's <call>/<ret> turns, the subagents and the verifier all run."""
    src = _folder(tmp_path / "user")
    data = tiny_lm.config("sft.steps=3", example="grpo_multiagent.yaml")
    data["model"] = {"path": str(src)}
    logs: list[str] = []
    run_dir = tmp_path / "run"
    summary = train_lm(load_lm_sections(data), run_dir, log=logs.append)
    assert any("added the task's tokens <step> <ans> <call> <ret>" in m for m in logs), logs
    assert summary["mode"] == "multiagent" and summary["iterations"] == 1
    assert summary["sft_steps"] == 3 and summary["sft_loss"] > 0
    tok = LMTokenizer.from_folder(run_dir / "base_model")
    assert all(tok.has_token(m) for m in ARITH_MARKERS)
    policy = LMTokenizer.from_folder(run_dir / "policy")
    assert all(policy.has_token(m) for m in ARITH_MARKERS)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["generated_tokens"] > 0
