"""Merged-weight LoRA (rlinf_algos.models.lora): training through ``W0 + scale * B @ A`` gives
peft's log-probs and adapter gradients; the reference (adapters disabled) stays the base model;
the rollout's merges start from the base weights each sync; and the settings that cannot merge
are refused where they are written."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlinf_algos.lm import hf
from rlinf_algos.lm.config import LMModelConfig, LoraConfig, ModelInitConfig, load_lm_sections
from rlinf_algos.models import lora as merged
from rlinf_core.errors import ConfigError, RlinfError

INIT = ModelInitConfig(hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=64)
IDS = torch.tensor([[1, 8, 9, 10, 11, 2], [1, 7, 11, 11, 2, 0], [1, 7, 8, 2, 0, 0]])


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hf.new_model_folder(tmp_path_factory.mktemp("m") / "qwen2", INIT, seed=0)


def _pair(folder: Path) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same LoRA model twice, through peft's adapter forward and the merged one, with
    non-zero B (peft starts B at 0, which would hide a wrong merge)."""
    models = []
    for flag in (False, True):
        torch.manual_seed(0)
        m = hf.load_causal_lm(
            LMModelConfig(path=str(folder), lora=LoraConfig(rank=4, alpha=8.0, merged_forward=flag))
        )
        with torch.no_grad():
            for name, p in m.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))) * 0.1)
        models.append(m)
    return models[0], models[1]


def _loss(model: torch.nn.Module) -> torch.Tensor:
    return -(hf.sequence_log_probs(model, IDS) * (IDS > 2)).sum()


def test_merged_forward_gives_peft_log_probs_and_adapter_gradients(folder: Path) -> None:
    adapters, fused = _pair(folder)
    bound = [m for m in fused.modules() if "forward" in vars(m)]
    assert len(bound) == 2 * 7  # every linear layer of both blocks (all-linear)
    assert not any("forward" in vars(m) for m in adapters.modules())
    _loss(adapters).backward()
    _loss(fused).backward()
    grads_a = {n: p.grad for n, p in adapters.named_parameters() if p.requires_grad}
    grads_f = {n: p.grad for n, p in fused.named_parameters() if p.requires_grad}
    assert set(grads_a) == set(grads_f) and all("lora_" in n for n in grads_f)
    for name, g in grads_a.items():
        assert g is not None and g.abs().sum() > 0, name
        torch.testing.assert_close(grads_f[name], g, rtol=1e-4, atol=1e-6, msg=name)
    assert all(p.grad is None for p in fused.parameters() if not p.requires_grad)
    with torch.no_grad():
        torch.testing.assert_close(
            hf.sequence_log_probs(fused, IDS), hf.sequence_log_probs(adapters, IDS), rtol=0, atol=1e-5
        )
        # the reference policy: the adapters disabled, the base model bit for bit
        with hf.reference_mode(fused) as ref_f, hf.reference_mode(adapters) as ref_a:
            base = hf.sequence_log_probs(ref_a, IDS)
            assert torch.equal(hf.sequence_log_probs(ref_f, IDS), base)
        assert not torch.allclose(hf.sequence_log_probs(fused, IDS), base, atol=1e-3)


def test_merges_start_from_the_base_weights(folder: Path) -> None:
    """Three merges of three adapters leave the weights at base + the last adapter's delta, not
    base + a sum of rounding errors; the bare layers generate as the merged wrappers do."""
    model, _ = _pair(folder)
    base = merged.lora_base_weights(model)
    assert base is not None and len(base) == 14
    with pytest.raises(RlinfError, match="not merged"), merged.bare_lora_layers(model):
        pass
    for step in range(3):
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.add_(0.01 * (step + 1))
        merged.merge_lora(model, base)
    layer = next(m for n, m in model.named_modules() if n.endswith("layers.0.mlp.down_proj"))
    want = base[next(n for n in base if n.endswith("layers.0.mlp.down_proj"))] + layer.get_delta_weight(
        "default"
    )
    torch.testing.assert_close(layer.get_base_layer().weight, want, rtol=0, atol=1e-7)
    with torch.no_grad():
        wrapped = hf.sequence_log_probs(model, IDS)
        with merged.bare_lora_layers(model) as bare:
            assert not any(hasattr(m, "lora_A") for m in bare.modules())
            assert torch.equal(hf.sequence_log_probs(bare, IDS), wrapped)
    assert sum(hasattr(m, "lora_A") for m in model.modules()) == 14  # the wrappers are back


def test_merged_forward_with_dropout_is_refused_at_its_yaml_path() -> None:
    run = {"algorithm": {"name": "grpo_lm"}, "model": {"type": "hf", "path": "x"}}
    run["model"]["lora"] = {"dropout": 0.1, "merged_forward": True}
    with pytest.raises(ConfigError, match=r"model\.lora") as err:
        load_lm_sections(run)
    assert "merged_forward needs dropout 0" in str(err.value)
    run["model"]["lora"] = {"dropout": 0.0, "merged_forward": True}
    assert load_lm_sections(run).model.lora.merged_forward


def test_the_rollout_merges_float32_adapters_unless_told_otherwise(folder: Path) -> None:
    """bfloat16 would round a small update away in a merged weight: the rollout samples through
    the adapters there unless rollout.options.merge_lora says otherwise."""
    from rlinf_algos.lm.engines import HFEngine

    spec = LMModelConfig(path=str(folder), lora=LoraConfig(rank=4, alpha=8.0))
    assert HFEngine(spec).base_weights is not None
    assert HFEngine(spec, merge_lora=False).base_weights is None
    half = spec.model_copy(update={"dtype": "bfloat16"})
    assert HFEngine(half).base_weights is None
    forced = HFEngine(half, merge_lora=True)
    assert forced.base_weights is not None
    assert all(w.device.type == "cpu" for w in forced.base_weights.values())
    assert HFEngine(LMModelConfig(path=str(folder))).base_weights is None  # no adapters
