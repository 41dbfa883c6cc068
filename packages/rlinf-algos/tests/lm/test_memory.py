"""The memory estimate of ``rlinf train --dry-run`` (:mod:`rlinf_algos.memory`): exact parameter
counts against real ``transformers`` models, what LoRA, dtype and FSDP change, and the refusal of
a plan that cannot fit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from rlinf_algos.config import LoraConfig
from rlinf_algos.lm.config import LMModelConfig, ModelInitConfig
from rlinf_algos.lm.memory import (
    config_from_dict,
    estimate_lm_memory,
    lm_model_counts,
    plan_memory,
)
from rlinf_algos.memory import GIB, check_fits
from rlinf_algos.models.lora import add_adapters
from rlinf_core.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"

LLAMA_7B = {  # Llama-2-7B's config.json (the sizes that matter)
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}


def _tiny(kind: str) -> Any:
    common = {
        "vocab_size": 97,
        "hidden_size": 32,
        "intermediate_size": 72,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
    }
    if kind == "qwen2":
        return Qwen2Config(**common, tie_word_embeddings=True)
    return LlamaConfig(**common, tie_word_embeddings=False)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_parameter_and_adapter_counts_match_real_models(kind: str) -> None:
    config = _tiny(kind)
    real = AutoModelForCausalLM.from_config(config)
    counts = lm_model_counts(config, {"rank": 4, "target_modules": "all-linear"})
    assert counts.params == real.num_parameters()
    lora = add_adapters(AutoModelForCausalLM.from_config(config), LoraConfig(rank=4), task_type="CAUSAL_LM")
    assert counts.lora_params == sum(p.numel() for p in lora.parameters() if p.requires_grad)
    only_q = lm_model_counts(config, {"rank": 4, "target_modules": ["q_proj"]})
    lora_q = add_adapters(
        AutoModelForCausalLM.from_config(config),
        LoraConfig(rank=4, target_modules=["q_proj"]),
        task_type="CAUSAL_LM",
    )
    assert only_q.lora_params == sum(p.numel() for p in lora_q.parameters() if p.requires_grad) > 0
    assert counts.kv_dim == 2 * 8 and counts.vocab == 97


def test_counts_from_config_dict_and_init_section(tmp_path: Path) -> None:
    counts = lm_model_counts(config_from_dict(LLAMA_7B))
    assert counts.params == 6_738_415_616  # Llama-2-7B's published count
    # model.init's sizes: the same model new_model_folder builds and saves
    from rlinf_algos.lm import hf

    init = ModelInitConfig(hidden_size=64, num_layers=2, num_heads=4)
    run = {"model": LMModelConfig(init=init).model_dump(mode="json"), "algorithm": {"name": "grpo_lm"}}
    est = estimate_lm_memory(run)
    folder = hf.new_model_folder(tmp_path / "m", init)
    real = hf.load_causal_lm(LMModelConfig(path=str(folder)))
    p = real.num_parameters()
    assert est[0].weights == 4 * p and est[0].optimizer == 8 * p and est[0].gradients == 4 * p


def _run(**model: Any) -> dict[str, Any]:
    return {
        "model": {"type": "hf", "dtype": "float32", "max_seq_len": 1024, **model},
        "algorithm": {"name": "grpo_lm", "minibatch_size": 64, "prompts_per_iter": 4, "group_size": 8},
        "actor": {"strategy": "fsdp", "micro_batch_size": 1},
    }


COUNTS_7B = lm_model_counts(config_from_dict(LLAMA_7B), {"rank": 16, "target_modules": "all-linear"})


def test_lora_lowers_gradients_and_optimizer_and_bf16_halves_frozen_weights() -> None:
    full = estimate_lm_memory(_run(), counts=COUNTS_7B)[0]
    lora = estimate_lm_memory(_run(lora={"rank": 16}), counts=COUNTS_7B)[0]
    p, a = COUNTS_7B.params, COUNTS_7B.lora_params
    assert full.gradients == 4 * p and full.optimizer == 8 * p
    assert lora.gradients == 4 * a and lora.optimizer == 8 * a and lora.optimizer < full.optimizer / 50
    bf_lora = estimate_lm_memory(_run(lora={"rank": 16}, dtype="bfloat16"), counts=COUNTS_7B)[0]
    assert bf_lora.weights == 2 * p + 4 * a and lora.weights == 4 * p + 4 * a
    # bf16 without LoRA keeps float32 master weights (load_causal_lm) plus autocast's bf16 copy
    bf_full = estimate_lm_memory(_run(dtype="bfloat16"), counts=COUNTS_7B)[0]
    assert bf_full.weights == 6 * p and bf_full.optimizer == 8 * p and bf_full.activations < full.activations
    # the rollout holds model.dtype weights
    assert estimate_lm_memory(_run(dtype="bfloat16"), counts=COUNTS_7B)[1].weights == 2 * p


def test_a_7b_full_fine_tune_on_one_80gb_gpu_is_refused_lora_or_8_fsdp_ranks_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rlinf_algos.lm import memory

    def roles(run: dict[str, Any], actor_ranks: int) -> Any:
        devices = {"actor": [f"cuda:{i}@node 0" for i in range(actor_ranks)], "rollout": ["cpu"]}
        with monkeypatch.context() as m:  # the 7B config's counts, without writing a model folder
            m.setattr(memory, "lm_model_counts", lambda *a, **k: COUNTS_7B)
            return plan_memory(run, devices, gpu_memory_gib=80)

    one = roles(_run(path=None, init={}), 1)
    assert one[0].fits is False and one[0].available == 80 * GIB and one[1].fits is None
    with pytest.raises(ConfigError) as err:
        check_fits(one)
    text = str(err.value)
    assert "\n" not in text and "the actor needs about" in text and "80.00 GiB" in text
    for knob in ("algorithm.minibatch_size", "model.lora", "actor placement size", "model.dtype"):
        assert knob in text
    check_fits(roles(_run(init={}, lora={"rank": 16}), 1))  # LoRA fits
    eight = roles(_run(init={}), 8)
    assert eight[0].fits is True and eight[0].optimizer == pytest.approx(8 * COUNTS_7B.params / 8, abs=8)
    check_fits(eight)
    # unknown memory (no GPU given, none on this machine): printed, never refused
    if not torch.cuda.is_available():
        devices = {"actor": ["cuda:0@node 0"], "rollout": ["cpu"]}
        run = _run(init={"hidden_size": 64, "num_layers": 2, "num_heads": 4})
        assert all(r.fits is None for r in plan_memory(run, devices))


def test_dry_run_prints_the_memory_block(host: Any, invoke: Any) -> None:
    res = invoke(host, "train", str(EXAMPLES / "grpo_arith.yaml"), "--dry-run")
    assert res.exit_code == 0, res.output
    assert "# memory per process" in res.output and "#   actor x1: weights" in res.output
    assert "#   rollout x1:" in res.output
    res = invoke(
        host,
        "train",
        str(EXAMPLES / "grpo_arith.yaml"),
        "--dry-run",
        "--gpus-per-node",
        "1",
        "runner.device=auto",
        "--gpu-memory",
        "0.05",
    )
    err = res.exception  # the console script prints it on one line and exits with its code, 2
    assert isinstance(err, ConfigError) and err.exit_code == 2, res.output
    assert (
        "\n" not in str(err)
        and "the actor needs about" in str(err)
        and "algorithm.minibatch_size" in str(err)
    )
