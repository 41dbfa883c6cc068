"""One rank of a grpo_lm learner group (run as a process by test_algos_parallel.py):

    python lm_rank.py RANK WORLD PORT STRATEGY MICRO LORA OUT

A small Qwen2 causal LM built from a transformers config (LoRA adapters on it when LORA is 1),
one GRPO update of the language-model actor on a fixed batch of 12 sequences in minibatches of
8, and rank 0 writes what a weight publish carries (the adapter alone with LoRA) to OUT.
"""

from __future__ import annotations

import os
import sys

import torch
from torch.distributed.tensor import DTensor
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlinf_algos.devices import resolve_device
from rlinf_algos.lm import hf
from rlinf_algos.lm.config import LMGRPOConfig, LoraConfig
from rlinf_algos.lm.learner import LMLearner
from rlinf_algos.parallel import DataParallel

VOCAB, N, T = 40, 12, 14


def model(lora: bool) -> torch.nn.Module:
    torch.manual_seed(5)
    cfg = Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True,
    )  # fmt: skip
    m = Qwen2ForCausalLM(cfg)
    if lora:
        torch.manual_seed(6)
        m = hf.apply_lora(m, LoraConfig(rank=4, alpha=8.0, target_modules=["q_proj", "v_proj"]))
    return m


def meta_model(lora: bool) -> torch.nn.Module:
    with torch.device("meta"):
        return model(lora)


def batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(9)
    lengths = torch.randint(6, T + 1, (N,), generator=g)
    ids = torch.randint(1, VOCAB, (N, T), generator=g)
    mask = torch.zeros(N, T)
    for i, n in enumerate(lengths.tolist()):
        ids[i, n:] = 0
        mask[i, 4:n] = 1.0  # a prompt of 4 tokens, then the response
    return {
        "input_ids": ids,
        "loss_mask": mask,
        "episode_index": torch.arange(N),
        "rewards": torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]),
        "ref_log_probs": torch.randn(N, T, generator=g) * 0.1 - 3.0,
    }


def main(argv: list[str]) -> None:
    rank, world, port = int(argv[0]), int(argv[1]), int(argv[2])
    strategy, micro, lora, out = argv[3], (int(argv[4]) or None), argv[5] == "1", argv[6]
    torch.set_num_threads(1)
    device = resolve_device(os.environ.get("RLINF_TEST_DEVICE", "cpu"))  # the GPU test: auto
    dp = DataParallel.start(
        rank, world, strategy=strategy, device=device, micro_batch_size=micro, timeout=60,
        addr="127.0.0.1", port=port,
    )  # fmt: skip
    cfg = LMGRPOConfig(group_size=4, minibatch_size=8, update_epochs=2, lr=1e-2, kl_coef=0.05)
    # under fsdp only rank 0 builds the weights; the ranks shard a meta skeleton and receive theirs
    actor = LMLearner(dp.wrap_loaded(lambda: model(lora), lambda: meta_model(lora)), cfg, seed=3, dp=dp)
    stats = actor.update(batch())
    gathered = []  # the elements FSDP gathers to publish (the adapter alone under LoRA)
    full_tensor = DTensor.full_tensor

    def counted(self: DTensor, *a: object, **kw: object) -> torch.Tensor:
        t = full_tensor(self, *a, **kw)
        gathered.append(t.numel())
        return t

    DTensor.full_tensor = counted  # type: ignore[method-assign]
    weights, version = actor.get_weights()  # gathered with FSDP: every rank calls
    DTensor.full_tensor = full_tensor  # type: ignore[method-assign]
    if rank == 0:
        torch.save({"weights": weights, "version": version, "stats": stats, "gathered": sum(gathered)}, out)
    dp.close()


if __name__ == "__main__":
    main(sys.argv[1:])
