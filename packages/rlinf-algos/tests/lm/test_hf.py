"""Hugging Face causal LMs as policies: model folders built here (Qwen2 and Llama
architectures, no downloads) loaded through the user's code path, KV-cached batched generation
against the uncached model, log-probs, LoRA adapter-only weight sync, the reference as the base
model with the adapter disabled, and the policy/adapter folders transformers and peft reload."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch

from rlinf_algos.lm import hf
from rlinf_algos.lm.config import LMModelConfig, LoraConfig, ModelInitConfig
from rlinf_algos.lm.engines import HFEngine
from rlinf_algos.lm.folder import check_model_folder, folder_context_length, has_chat_template
from rlinf_algos.lm.learner import LMLearner, ReferenceModel
from rlinf_algos.lm.tokens import LMTokenizer, TokenizerError
from rlinf_core.errors import ConfigError, RlinfError

INIT = ModelInitConfig(hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=64)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hf.new_model_folder(tmp_path_factory.mktemp("m") / "qwen2", INIT, seed=0)


@pytest.fixture(scope="module")
def tok(folder: Path) -> LMTokenizer:
    return LMTokenizer.from_folder(folder)


@pytest.fixture(scope="module")
def model(folder: Path) -> object:
    m = hf.load_causal_lm(LMModelConfig(path=str(folder)), trainable=False)
    with torch.no_grad():  # a livelier random model than the 0.02 init, so greedy outputs vary
        for p in m.parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.5)
    return m.eval()


def _prompts(tok: LMTokenizer) -> list[list[int]]:
    return [tok.encode(t, bos=True) for t in ("12+3=", "7=", "123+456+78=", "(1+2)+(3+4)=")]


def _greedy_uncached(m: object, prompt: list[int], n: int, stop: int) -> list[int]:
    seq, out = list(prompt), []
    with torch.no_grad():
        for _ in range(n):
            t = int(m(input_ids=torch.tensor([seq])).logits[0, -1].argmax())
            out.append(t)
            seq.append(t)
            if t == stop:
                break
    return out


def test_folder_is_an_ordinary_hf_model_folder(folder: Path, tok: LMTokenizer) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["model_type"] == "qwen2" and cfg["max_position_embeddings"] == 64
    assert folder_context_length(folder) == 64
    hf_tok = AutoTokenizer.from_pretrained(str(folder))
    assert len(hf_tok) == cfg["vocab_size"] == tok.vocab_size  # no token past the model's vocabulary
    text = "<bos>48+31=<step>0048+0031=0079<ans>79<eos>"
    assert hf_tok.encode(text, add_special_tokens=False) == tok.encode(text)
    assert tok.decode(tok.encode(text)) == text
    assert AutoModelForCausalLM.from_pretrained(str(folder)).num_parameters() > 0
    with pytest.raises(TokenizerError, match="cannot encode"):
        tok.encode("x")
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        tok.decode([10_000])


def test_llama_architecture_loads_through_the_same_path(tmp_path: Path) -> None:
    init = INIT.model_copy(update={"architecture": "llama", "num_kv_heads": 2})
    path = hf.new_model_folder(tmp_path / "llama", init)
    m = hf.load_causal_lm(LMModelConfig(path=str(path)))
    assert m.config.model_type == "llama" and m.config.num_key_value_heads == 2
    from transformers import AutoTokenizer

    assert len(AutoTokenizer.from_pretrained(str(path))) == m.config.vocab_size
    out = hf.generate(m, [[1, 8, 9]], 5, [], temperature=0.0)
    assert len(out.tokens[0]) == 5


def test_folder_errors_name_the_yaml_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a folder") as e:
        check_model_folder(tmp_path / "nope")
    assert e.value.problems[0].path == "model.path"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no config\\.json"):
        check_model_folder(tmp_path / "empty")
    from transformers import ViTConfig

    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(tmp_path / "vit")
    with pytest.raises(ConfigError, match="not a causal language model"):
        check_model_folder(tmp_path / "vit")
    with pytest.raises(ValueError, match="not both"):
        LMModelConfig(path=".", init=INIT)
    assert LMModelConfig().init == ModelInitConfig()  # neither: a fresh default model


def test_cached_batched_greedy_matches_uncached_model(model: object, tok: LMTokenizer) -> None:
    prompts = _prompts(tok)
    out = hf.generate(model, prompts, 20, [tok.eos_id], pad_id=tok.pad_id, temperature=0.0)
    for p, got, fin in zip(prompts, out.tokens, out.finished, strict=True):
        assert got == _greedy_uncached(model, p, 20, tok.eos_id)
        assert fin == (got[-1] == tok.eos_id)
    assert out.num_tokens == sum(len(t) for t in out.tokens)
    assert len({tuple(t) for t in out.tokens}) > 1  # the check is not vacuous


def test_left_padding_and_compaction_do_not_change_results(model: object, tok: LMTokenizer) -> None:
    prompts = _prompts(tok)
    stop_ids = [tok.eos_id, *tok.encode("35")]  # many stop tokens: rows finish early
    alone = [hf.generate(model, [p], 30, stop_ids, temperature=0.0).tokens[0] for p in prompts]
    batched = hf.generate(model, prompts * 3, 30, stop_ids, temperature=0.0, compact_below=0.99)
    assert batched.tokens == alone * 3
    for toks in batched.tokens:  # nothing after a stop token
        hits = [i for i, t in enumerate(toks) if t in stop_ids]
        assert hits in ([], [len(toks) - 1])


def test_preallocated_cache_samples_what_the_dynamic_cache_samples(
    model: object, tok: LMTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """generate() writes keys and values into buffers sized for the longest sequence and
    projects only the prefill's last position onto the vocabulary; transformers' own cache and
    full logits give the same samples, with rows finishing early and leaving the cache."""
    from transformers import DynamicCache

    prompts = _prompts(tok) * 4
    stop_ids = [tok.eos_id, *tok.encode("35")]

    def run() -> list[list[int]]:
        gen = torch.Generator().manual_seed(5)
        return hf.generate(model, prompts, 30, stop_ids, generator=gen, compact_below=0.9).tokens

    assert hf.last_logits_kwargs(model) == {"logits_to_keep": 1}
    ours = run()
    monkeypatch.setattr(hf, "preallocated_cache", lambda m, capacity: DynamicCache(config=m.config))
    monkeypatch.setattr(hf, "last_logits_kwargs", lambda m: {})
    assert run() == ours
    assert len({len(t) for t in ours}) > 2  # rows finished at different steps: compaction ran


def test_preallocated_layer_behaves_as_a_dynamic_layer() -> None:
    from transformers.cache_utils import DynamicLayer

    from rlinf_algos.lm.kvcache import PreallocatedLayer

    g = torch.Generator().manual_seed(0)
    ours, ref = PreallocatedLayer(capacity=4), DynamicLayer()
    for n in (3, 1, 1, 2):  # the third update outgrows the buffers, which double
        k, v = torch.randn(5, 2, n, 8, generator=g), torch.randn(5, 2, n, 8, generator=g)
        for got, want in zip(ours.update(k, v), ref.update(k, v), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert ours.get_seq_length() == ref.get_seq_length()
    assert ours.capacity == 8
    idx = torch.tensor([4, 0, 2])
    ours.batch_select_indices(idx)
    ref.batch_select_indices(idx)
    ours.crop(-2)
    ref.crop(-2)
    k, v = torch.randn(3, 2, 1, 8, generator=g), torch.randn(3, 2, 1, 8, generator=g)
    for got, want in zip(ours.update(k, v), ref.update(k, v), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert ours.get_seq_length() == 6


def test_max_new_tokens_and_context_cap(model: object) -> None:
    out = hf.generate(model, [[1, 8], [1, 9, 9]], 3, [], temperature=1.0)
    assert all(len(t) == 3 for t in out.tokens) and not any(out.finished)
    assert len(hf.generate(model, [[1] * 60], 50, [], temperature=1.0).tokens[0]) == 4  # 64 - 60
    with pytest.raises(RlinfError, match="no room"):
        hf.generate(model, [[1] * 64], 5, [])
    with pytest.raises(RlinfError, match="at least one token"):
        hf.generate(model, [[]], 5, [])


def test_sampling_is_seeded_and_tiny_top_p_is_greedy(model: object, tok: LMTokenizer) -> None:
    prompts = _prompts(tok)

    def run(seed: int, **kw: float) -> list[list[int]]:
        gen = torch.Generator().manual_seed(seed)
        return hf.generate(model, prompts, 12, [], generator=gen, **kw).tokens

    assert run(1) == run(1)
    assert run(1) != run(2)
    assert run(3, top_p=1e-6) == hf.generate(model, prompts, 12, [], temperature=0.0).tokens


def test_sequence_log_probs_match_a_manual_softmax(model: object) -> None:
    ids = torch.tensor([[1, 8, 9, 10, 2], [1, 11, 12, 0, 0]])
    with torch.no_grad():
        lp = hf.sequence_log_probs(model, ids, temperature=0.7)
        logits = model(input_ids=ids).logits / 0.7
    assert lp.shape == (2, 5) and torch.all(lp[:, 0] == 0)
    for b in range(2):
        for t in range(1, 5):
            expect = torch.log_softmax(logits[b, t - 1], -1)[ids[b, t]]
            assert math.isclose(float(lp[b, t]), float(expect), rel_tol=1e-4, abs_tol=1e-5)
    with torch.no_grad():  # padding at the end does not change the real tokens' log-probs
        short = hf.sequence_log_probs(model, ids[1:, :3])
        padded = hf.sequence_log_probs(model, ids[1:])
    assert torch.allclose(short, padded[:, :3], atol=1e-5)


@pytest.mark.parametrize(
    ("lora", "merge"),
    [(None, True), (LoraConfig(rank=4, alpha=8.0), False), (LoraConfig(rank=4, alpha=8.0), True)],
    ids=["full", "lora", "lora-merged"],
)
def test_rollout_log_probs_equal_the_learners_after_a_sync(
    folder: Path, lora: LoraConfig | None, merge: bool
) -> None:
    """GRPO updates on the actor, a publish after each, a load on a separately built rollout
    worker: both compute identical log-probs (bit for bit through the adapters; to float
    rounding from merged weights). With LoRA the publish is the adapter alone."""
    from rlinf_algos.lm.config import LMGRPOConfig

    spec = LMModelConfig(path=str(folder), lora=lora)
    torch.manual_seed(0)
    actor = LMLearner(
        hf.load_causal_lm(spec), LMGRPOConfig(group_size=2, lr=1e-2, lr_warmup_iters=0, kl_coef=0.0)
    )
    rollout = HFEngine(spec, temperature=1.0, merge_lora=merge)
    ids = torch.tensor([[1, 8, 9, 10, 11, 2], [1, 8, 9, 12, 13, 2], [1, 7, 11, 11, 2, 0], [1, 7, 8, 2, 0, 0]])
    batch = {
        "input_ids": ids,
        "loss_mask": (ids > 2).float(),
        "episode_index": torch.arange(4),
        "rewards": torch.tensor([1.0, 0.0, 0.0, 1.0]),
    }
    for _ in range(3):  # merges start from the base weights each time: no drift over syncs
        stats = actor.update(batch)
        assert stats["trained_sequences"] == 4
        state, version = actor.get_weights()
        rollout.set_weights(state, version)
    with torch.no_grad():
        a = hf.sequence_log_probs(actor.model.eval(), ids)
        r = hf.sequence_log_probs(rollout.model, ids)
    if lora is not None and merge:
        assert torch.allclose(a, r, atol=1e-5)
        merged = dict(copy.deepcopy(actor.model).merge_and_unload().named_parameters())
        for name, p in rollout.model.get_base_model().named_parameters():
            if "lora_" not in name:
                key = name.replace(".base_layer", "")
                assert torch.allclose(p, merged[key], atol=1e-6), name
        assert rollout.base_weights is not None
    else:
        assert torch.equal(a, r)
    trainable, total = hf.parameter_counts(actor.model)
    if lora is None:
        assert trainable == total and actor.publish_bytes == 4 * total
    else:
        assert set(state) and all("lora_" in k for k in state)
        assert actor.publish_bytes == 4 * trainable < 4 * total // 5


def test_lora_reference_is_the_base_model_without_a_copy(folder: Path) -> None:
    spec = LMModelConfig(path=str(folder), lora=LoraConfig(rank=4))
    m = hf.load_causal_lm(spec)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.normal_()  # a trained adapter (B starts at zero)
    base = hf.load_causal_lm(LMModelConfig(path=str(folder)), trainable=False)
    ref = ReferenceModel(model=m)
    ids = torch.tensor([[1, 8, 9, 10, 2]])
    got = ref.compute_log_probs({"input_ids": ids})["ref_log_probs"]
    with torch.no_grad():
        assert torch.allclose(got, hf.sequence_log_probs(base, ids), atol=1e-6)
        assert not torch.allclose(got, hf.sequence_log_probs(m, ids), atol=1e-3)  # adapter back on
    assert ref.model is m  # shares the actor's weights


def test_policy_and_adapter_folders_reload_with_transformers_and_peft(folder: Path, tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    m = hf.load_causal_lm(LMModelConfig(path=str(folder), lora=LoraConfig(rank=4)))
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.normal_()
    hf.save_model_folder(m, folder, tmp_path / "policy", tmp_path / "adapter")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter", "policy"]  # no temp folder left
    ids = torch.tensor([[1, 8, 9, 10, 2]])
    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "policy"))
    AutoTokenizer.from_pretrained(str(tmp_path / "policy"))
    adapter = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(str(folder)), str(tmp_path / "adapter")
    )
    with torch.no_grad():
        want = hf.sequence_log_probs(m, ids)
        assert torch.allclose(hf.sequence_log_probs(merged, ids), want, atol=1e-5)
        assert torch.allclose(hf.sequence_log_probs(adapter, ids), want, atol=1e-5)
    hf.save_model_folder(merged, folder, tmp_path / "policy")  # replacing a folder keeps one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter", "policy"]


def test_bpe_tokenizer_has_a_chat_template(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    corpus = [f"What is {a} + {b}? {a + b}" for a in range(30) for b in range(30)]
    init = INIT.model_copy(update={"tokenizer": "bpe", "vocab_size": 320})
    path = hf.new_model_folder(tmp_path / "bpe", init, corpus=corpus)
    assert has_chat_template(path) and not has_chat_template(tmp_path)
    t = AutoTokenizer.from_pretrained(str(path))
    text = t.apply_chat_template(
        [{"role": "user", "content": "What is 3 + 4?"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n"
    light = LMTokenizer.from_folder(path)
    assert light.eos_id == t.convert_tokens_to_ids("<|im_end|>")
    assert light.decode(light.encode(text)) == text
    assert light.decode(light.encode("naïve ✓")) == "naïve ✓"  # byte-level: any text encodes
    with pytest.raises(ConfigError, match="data section"):
        hf.new_model_folder(tmp_path / "x", init)


@pytest.mark.parametrize("architecture", ["qwen2", "llama"])
def test_bpe_folder_encodes_as_transformers_loads_it(architecture: str, tmp_path: Path) -> None:
    """transformers loads a qwen2 folder with Qwen2Tokenizer, which rebuilds its own normaliser
    and pre-tokeniser: the folder's tokenizer (and rlinf's light reader of it) must split text
    exactly as that class does, or a model trained here reads other tokens in a user's script."""
    from transformers import AutoTokenizer

    corpus = [
        f"What is {a} + {b}? {a} + {b} = {a + b} #### {a + b}" for a in range(10, 60) for b in range(10, 40)
    ]
    init = INIT.model_copy(update={"tokenizer": "bpe", "vocab_size": 400, "architecture": architecture})
    path = hf.new_model_folder(tmp_path / architecture, init, corpus=corpus)
    t, light = AutoTokenizer.from_pretrained(str(path)), LMTokenizer.from_folder(path)
    texts = [
        "What is 74 + 82? 74 + 82 = 156 #### 156",
        t.apply_chat_template([{"role": "user", "content": "What is 31 + 12?"}], tokenize=False),
        "naïve ✓ 2026",
    ]
    for text in texts:
        assert t.encode(text, add_special_tokens=False) == light.encode(text), text
    assert [light.decode([i]) for i in light.encode("156")] == ["1", "5", "6"]  # Qwen's digits


def test_a_users_folder_encodes_as_transformers_loads_it(tmp_path: Path) -> None:
    """A hand-made qwen2 folder whose tokenizer.json was trained with GPT-2's byte-level
    pre-tokenizer (so it merged multi-digit numbers): transformers reads it through
    Qwen2Tokenizer, which splits digits apart, and rlinf must train on those same tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer

    corpus = [f"What is {a} + {b}? {a} + {b} = {a + b}" for a in range(10, 60) for b in range(10, 40)]
    init = INIT.model_copy(update={"tokenizer": "bpe", "vocab_size": 400})
    path = hf.new_model_folder(tmp_path / "user", init, corpus=corpus)
    gpt2 = Tokenizer(models.BPE())
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    gpt2.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    gpt2.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    gpt2.save(str(path / "tokenizer.json"))
    text = "What is 74 + 82? 74 + 82 = 156"
    assert len(gpt2.encode(text).ids) < len(text.split()) * 2  # the file alone merges numbers
    want = AutoTokenizer.from_pretrained(str(path)).encode(text, add_special_tokens=False)
    light = LMTokenizer.from_folder(path)
    assert light.encode(text) == want != gpt2.encode(text).ids
    assert light.eos_id == gpt2.token_to_id("<|im_end|>") and light.pad_id == gpt2.token_to_id(
        "<|endoftext|>"
    )
