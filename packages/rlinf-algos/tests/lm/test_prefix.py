"""Shared-prefix log-probs (``algorithm.share_prefix``): each distinct prompt runs once and the
completions run on top of its key/value cache. They must equal the packed forward's log-probs
and gradients (Qwen2 and Llama folders built here, full and LoRA), and a GRPO update with the
option on must land on the same weights as with it off."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlinf_algos.lm import hf
from rlinf_algos.lm.config import LMGRPOConfig, LMModelConfig, LoraConfig, ModelInitConfig
from rlinf_algos.lm.learner import LMLearner, ReferenceModel
from rlinf_algos.lm.prefix import prefix_groups, shared_prefix_log_probs


def _folder(tmp: Path, arch: str) -> Path:
    init = ModelInitConfig(
        architecture=arch,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        max_position_embeddings=64,
    )
    return hf.new_model_folder(tmp / arch, init, seed=0)


def _batch(prompts: int = 4, group: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded rows [prompt, completion] with prompts of different lengths, each shared by
    ``group`` completions of different lengths; the last row is multi-turn (an untrained span
    between two trained ones)."""
    g = torch.Generator().manual_seed(seed)
    rows, masks = [], []
    for p in range(prompts):
        prompt = torch.randint(3, 14, (4 + 2 * p,), generator=g).tolist()
        for k in range(group):
            comp = torch.randint(3, 14, (1 + (k + p) % 4,), generator=g).tolist()
            rows.append(prompt + comp)
            masks.append([0] * len(prompt) + [1] * len(comp))
    rows[-1] = rows[-1] + [5, 6, 7, 8]
    masks[-1] = masks[-1] + [0, 0, 1, 1]
    t = max(map(len, rows))
    ids = torch.zeros(len(rows), t, dtype=torch.long)
    mask = torch.zeros(len(rows), t)
    for i, (r, m) in enumerate(zip(rows, masks, strict=True)):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
    return ids, mask


def test_prefix_groups_find_the_shared_prompts() -> None:
    ids, mask = _batch(prompts=3, group=2)
    start, group, firsts = prefix_groups(ids, mask)
    assert start.tolist() == [4, 4, 6, 6, 8, 8]
    assert group.tolist() == [0, 0, 1, 1, 2, 2] and firsts == [0, 2, 4]
    assert prefix_groups(ids, torch.zeros_like(mask)) is None  # no trained token: nothing to share
    assert prefix_groups(ids, torch.ones_like(mask)) is None  # no prefix


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("lora", [None, LoraConfig(rank=4, alpha=8.0)], ids=["full", "lora"])
def test_shared_prefix_log_probs_and_gradients_equal_the_packed_forward(
    tmp_path: Path, arch: str, lora: LoraConfig | None
) -> None:
    model = hf.load_causal_lm(LMModelConfig(path=str(_folder(tmp_path, arch)), lora=lora))
    with torch.no_grad():  # livelier than the 0.02 init
        for n, p in model.named_parameters():
            if (p.ndim == 2 and "lora_" not in n) or "lora_B" in n:
                p.normal_(0.0, 0.3)
    model.train()
    ids, mask = _batch()
    plain = hf.sequence_log_probs(model, ids, 0.7)
    shared = shared_prefix_log_probs(model, ids, mask, 0.7)
    assert shared.shape == plain.shape
    # equal wherever a token follows the prefix (the loss reads only the masked ones)
    start, _, _ = prefix_groups(ids, mask)
    after = torch.arange(ids.shape[1])[None] >= start[:, None]
    lengths = (ids > 0).sum(1)
    after &= torch.arange(ids.shape[1])[None] < lengths[:, None]
    assert torch.allclose(shared[after], plain[after], atol=2e-5), (shared - plain)[after].abs().max()
    params = [p for p in model.parameters() if p.requires_grad]
    g_plain = torch.autograd.grad((plain * mask).sum(), params)
    g_shared = torch.autograd.grad((shared * mask).sum(), params)
    for a, b in zip(g_plain, g_shared, strict=True):  # float32 rounding of sums in another order
        assert float((a - b).norm()) <= 1e-4 * float(a.norm()) + 1e-6


def test_no_sharing_falls_back_to_the_packed_forward(tmp_path: Path) -> None:
    model = hf.load_causal_lm(LMModelConfig(path=str(_folder(tmp_path, "qwen2"))), trainable=False)
    ids, mask = _batch(prompts=4, group=1)  # every prompt once: nothing to share
    with torch.no_grad():
        assert torch.equal(shared_prefix_log_probs(model, ids, mask), hf.sequence_log_probs(model, ids))


def test_a_grpo_update_is_the_same_with_and_without_sharing(tmp_path: Path) -> None:
    spec = LMModelConfig(path=str(_folder(tmp_path, "qwen2")))
    ids, mask = _batch(prompts=2, group=4)
    batch = {
        "input_ids": ids,
        "loss_mask": mask,
        "episode_index": torch.arange(8),
        "rewards": torch.tensor([1.0, 0.0, 0.5, 0.0, 0.0, 1.0, 1.0, 0.2]),
    }
    runs = []
    for share in (False, True):
        torch.manual_seed(0)
        cfg = LMGRPOConfig(
            group_size=4,
            lr=1e-2,
            lr_warmup_iters=0,
            kl_coef=0.0,
            share_prefix=share,
            minibatch_size=4,
            update_epochs=2,
        )
        actor = LMLearner(hf.load_causal_lm(spec), cfg, seed=0)
        runs.append(actor.update(batch))
    # two epochs of two minibatches: the old log-probs and every step's loss and gradient agree
    # (not the weights bit for bit: Adam's first steps are sign steps, and a gradient entry
    # within rounding of zero may take either sign)
    assert runs[0]["trained_sequences"] == runs[1]["trained_sequences"] == 8
    for k in ("loss", "grad_norm", "kl", "clip_fraction"):
        assert runs[1][k] == pytest.approx(runs[0][k], rel=1e-3, abs=1e-6), k
    # the reference reads the loss mask too and gives the packed forward's log-probs
    ref = ReferenceModel(spec)
    got = ref.compute_log_probs(batch)["ref_log_probs"]
    with torch.no_grad():
        want = hf.sequence_log_probs(ref.model, ids)
    assert torch.allclose(got * mask, want * mask, atol=1e-5)
