"""The TinyLM policy: KV-cached batched generation against the uncached model, log-probs,
sampling controls, save/load."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rlinf_algos.lm.config import LMModelConfig
from rlinf_algos.lm.model import TinyLM, generate, load_policy, save_policy, sequence_log_probs
from rlinf_algos.lm.tokenizer import CharTokenizer
from rlinf_core.errors import RlinfError

TOK = CharTokenizer()
CFG = LMModelConfig(d_model=32, n_layers=2, n_heads=4, max_seq_len=64)


@pytest.fixture(scope="module")
def model() -> TinyLM:
    torch.manual_seed(0)
    m = TinyLM(CFG, TOK.vocab_size)
    with torch.no_grad():  # a livelier random model than the 0.02 init, so greedy outputs vary
        for p in m.parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.5)
    return m.eval()


def _greedy_uncached(m: TinyLM, prompt: list[int], n: int, stop: int) -> list[int]:
    seq = list(prompt)
    out = []
    with torch.no_grad():
        for _ in range(n):
            t = int(m(torch.tensor([seq]))[0, -1].argmax())
            out.append(t)
            seq.append(t)
            if t == stop:
                break
    return out


PROMPTS = [[1, 8, 9, 10], [1, 11], [1, 12, 13, 14, 15, 16, 17, 18], [1, 7, 7, 9, 10, 11]]


def test_cached_batched_greedy_matches_uncached_model(model: TinyLM) -> None:
    stop = TOK.eos_id
    out = generate(model, PROMPTS, 20, [stop], temperature=0.0)
    for p, got, fin in zip(PROMPTS, out.tokens, out.finished, strict=True):
        assert got == _greedy_uncached(model, p, 20, stop)
        assert fin == (got[-1] == stop)
    assert out.num_tokens == sum(len(t) for t in out.tokens)
    assert len({tuple(t) for t in out.tokens}) > 1  # the check is not vacuous


def test_left_padding_and_compaction_do_not_change_results(model: TinyLM) -> None:
    stop_ids = [TOK.eos_id, TOK.stoi["3"], TOK.stoi["5"]]  # many stop tokens: rows finish early
    alone = [generate(model, [p], 30, stop_ids, temperature=0.0).tokens[0] for p in PROMPTS]
    batched = generate(model, PROMPTS * 3, 30, stop_ids, temperature=0.0, compact_below=0.99)
    assert batched.tokens == alone * 3
    for toks in batched.tokens:  # nothing after a stop token
        hits = [i for i, t in enumerate(toks) if t in stop_ids]
        assert hits in ([], [len(toks) - 1])


def test_max_new_tokens_and_context_cap(model: TinyLM) -> None:
    out = generate(model, PROMPTS, 3, [], temperature=1.0)
    assert all(len(t) == 3 for t in out.tokens) and not any(out.finished)
    long = [[1] * 60]
    assert len(generate(model, long, 50, [], temperature=1.0).tokens[0]) == 4  # 64 - 60
    with pytest.raises(RlinfError, match="max_seq_len"):
        generate(model, [[1] * 64], 5, [])
    with pytest.raises(RlinfError, match="at least one token"):
        generate(model, [[]], 5, [])


def test_sampling_is_seeded_and_tiny_top_p_is_greedy(model: TinyLM) -> None:
    def run(seed: int, **kw: float) -> list[list[int]]:
        return generate(model, PROMPTS, 12, [], generator=torch.Generator().manual_seed(seed), **kw).tokens

    assert run(1) == run(1)
    assert run(1) != run(2)
    greedy = generate(model, PROMPTS, 12, [], temperature=0.0).tokens
    assert run(3, top_p=1e-6) == greedy


def test_sequence_log_probs_match_a_manual_softmax(model: TinyLM) -> None:
    ids = torch.tensor([[1, 8, 9, 10, 2], [1, 11, 12, 0, 0]])
    with torch.no_grad():
        lp = sequence_log_probs(model, ids, temperature=0.7)
    assert lp.shape == (2, 5) and torch.all(lp[:, 0] == 0)
    with torch.no_grad():
        logits = model(ids) / 0.7
    for b in range(2):
        for t in range(1, 5):
            expect = torch.log_softmax(logits[b, t - 1], -1)[ids[b, t]]
            assert math.isclose(float(lp[b, t]), float(expect), rel_tol=1e-4, abs_tol=1e-5)
    # the padding at the end does not change the real tokens' log-probs
    with torch.no_grad():
        short = sequence_log_probs(model, ids[1:, :3])
        padded = sequence_log_probs(model, ids[1:])
    assert torch.allclose(short, padded[:, :3], atol=1e-5)


def test_model_config_rejects_bad_heads() -> None:
    with pytest.raises(ValueError, match="multiple of n_heads"):
        LMModelConfig(d_model=30, n_heads=4)


def test_save_load_round_trip_is_atomic(model: TinyLM, tmp_path: Path) -> None:
    path = save_policy(tmp_path / "sub" / "policy.pt", model, TOK, {"iteration": 3})
    assert [p.name for p in path.parent.iterdir()] == ["policy.pt"]  # no temp file left behind
    m2, tok2, meta = load_policy(path)
    assert meta == {"iteration": 3} and tok2.itos == TOK.itos and m2.cfg == model.cfg
    ids = torch.tensor([PROMPTS[2]])
    with torch.no_grad():
        assert torch.equal(m2(ids), model(ids))
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(RlinfError, match="cannot read policy checkpoint"):
        load_policy(tmp_path / "junk.pt")
    with pytest.raises(RlinfError, match="not found"):
        load_policy(tmp_path / "missing.pt")
