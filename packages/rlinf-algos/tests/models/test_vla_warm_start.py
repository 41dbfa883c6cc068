"""``model.warm_start``: the supervised perception warm start of vla policies
(:mod:`rlinf_algos.perception`) on the real instruct-reach twin, in both runtimes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from rlinf_algos.config import WarmStartConfig
from rlinf_algos.envs import VectorEnvStepper
from rlinf_algos.models import build_policy
from rlinf_algos.perception import SEED_OFFSET, collect_frames, fit_perception, warm_start_policy
from rlinf_algos.safe_state import load_state
from rlinf_core.errors import ConfigError

pytest.importorskip("rlinf_hw_franka", reason="rlinf/FrankaInstructReach-v0 comes with rlinf-hw-franka")

ENV = "rlinf/FrankaInstructReach-v0"


def _env(privileged: bool = True, num_envs: int = 4) -> SimpleNamespace:
    kwargs = {"image_size": [32, 32], **({"privileged": True} if privileged else {})}
    return SimpleNamespace(
        id=ENV,
        num_envs=num_envs,
        kwargs=kwargs,
        obs_mode="state",
        image_size=(64, 64),
        max_episode_steps=None,
        wrappers=[],
    )


def _spec() -> dict[str, Any]:
    stepper = VectorEnvStepper(ENV, 1, 0, env_kwargs=_env().kwargs)
    try:
        space = stepper.obs_space
    finally:
        stepper.close()
    return {
        "type": "vla",
        "cls": "GaussianActorCritic",
        "obs_space": space,
        "act_dim": 3,
        "hidden": [32],
        "predict_privileged": 1.0,
    }


def test_frames_come_from_many_scenes_with_their_privileged_labels() -> None:
    opts = WarmStartConfig(frames=30, episode_steps=3)
    raw, scenes, record = collect_frames(_env(), opts, seed=SEED_OFFSET)
    assert raw["image"].shape == (30, 32, 32, 3) and raw["image"].dtype == np.uint8
    assert raw["privileged"].shape == (30, 6) and len(raw["instruction"]) == 30
    # 4 envs, episodes of 3 steps: 8 steps give 4 + 8 = 12 scenes with a fresh reset each
    assert record["frames"] == 30 and record["scenes"] == np.unique(scenes).size >= 10
    # a scene is one episode: its frames are consecutive steps of one sub-env (at most 3)
    assert scenes.shape == (30,) and np.bincount(scenes).max() <= 3
    # the label is the named cube's point and its offset from the hand: both vary across frames
    assert np.unique(raw["privileged"][:, 0]).size > 5
    again, _, _ = collect_frames(_env(), opts, seed=SEED_OFFSET)
    assert all(np.array_equal(raw[k], again[k]) for k in raw)  # the same seed, the same frames


def test_fitting_lowers_the_error_on_the_labels() -> None:
    raw, scenes, _ = collect_frames(_env(), WarmStartConfig(frames=80, episode_steps=4), seed=SEED_OFFSET)
    torch.manual_seed(0)
    model = build_policy(_spec())
    obs = model.normalize(raw)

    def train_error() -> float:  # in metres, whatever the head's standardisation
        with torch.no_grad():
            return float((model.predicted_privileged(obs) - obs["privileged"]).square().sum(-1).mean())

    before = train_error()
    head_before = [p.detach().clone() for p in model.actor_mean.parameters()]
    rec = fit_perception(model, raw, WarmStartConfig(epochs=40, batch_size=16, lr=3e-3), 0, None, scenes)
    obs = model.normalize(raw)  # the state statistics were folded from the frames
    assert train_error() < 0.3 * before
    # the head's target is centred and divided by one scale: the root mean of the entries' variances
    scale = obs["privileged"].var(0).mean().sqrt()
    assert torch.allclose(model.privileged_std, scale.expand(6), rtol=0.25)
    assert torch.allclose(model.privileged_mean, obs["privileged"].mean(0), atol=0.05)
    assert {"val_error_m", "val_within_2cm", "val_loss", "fit_s"} <= set(rec)
    # the warm start trains perception only: the policy head is RL's
    assert all(torch.equal(a, b) for a, b in zip(head_before, model.actor_mean.parameters(), strict=True))


def test_what_a_warm_start_cannot_fit_is_refused_with_its_key() -> None:
    from rlinf_algos.config import VLAModelConfig
    from rlinf_algos.models import validate_model_section

    with pytest.raises(ValueError, match="predict_privileged"):
        VLAModelConfig(type="vla", warm_start={})
    with pytest.raises(ValueError, match=r"model\.type vla") as not_mlp:
        validate_model_section({"type": "mlp", "warm_start": {}})
    assert not_mlp.value.problems[0].path == "model.warm_start"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"env\.kwargs\.privileged") as err:
        collect_frames(_env(privileged=False), WarmStartConfig(frames=4), seed=0)
    assert err.value.problems[0].path == "model.warm_start"
    spec = {k: v for k, v in _spec().items() if k != "predict_privileged"}
    with pytest.raises(ConfigError, match="predict_privileged"):
        fit_perception(build_policy(spec), {}, WarmStartConfig(), seed=0)


def _config(tmp: Path, scheduler: str, **algorithm: Any) -> Path:
    cfg = {
        "algorithm": {
            "name": "ppo",
            "rollout_steps": 8,
            "minibatch_size": 16,
            "update_epochs": 1,
            **algorithm,
        },
        "env": {"id": ENV, "num_envs": 2, "kwargs": {"privileged": True, "image_size": [32, 32]}},
        "model": {
            "type": "vla",
            "hidden_sizes": [32],
            "predict_privileged": 1.0,
            "warm_start": {"frames": 48, "episode_steps": 4, "epochs": 2, "batch_size": 16},
        },
        "runner": {"total_steps": 16, "seed": 1, "scheduler": scheduler, "torch_threads": 1},
    }
    if scheduler == "ray":
        node = {"node_group": "node", "placement": "0"}
        cfg["cluster"] = {
            "num_nodes": 1,
            "component_placement": {c: node for c in ("env", "rollout", "actor")},
        }
    path = tmp / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("scheduler", ["local", pytest.param("ray", marks=pytest.mark.slow)])
def test_training_starts_from_the_warm_start(tmp_path: Path, host: Any, invoke: Any, scheduler: str) -> None:
    run = tmp_path / "run"
    # a learning rate of 1e-12 leaves the weights where they started: policy.safetensors shows where that was
    res = invoke(host, "train", str(_config(tmp_path, scheduler, lr=1e-12)), "--run-dir", str(run), "--quiet")
    assert res.exit_code == 0, res.output + repr(res.exception)
    summary = json.loads((run / "summary.json").read_text())
    warm = summary["warm_start"]
    assert warm["frames"] == 48 and warm["scenes"] >= 12 and warm["val_error_m"] > 0
    saved = load_state(run / "warm_start.safetensors")
    assert saved["record"] == warm
    final = load_state(run / "policy.safetensors")["state_dict"]
    for name, tensor in saved["state_dict"].items():
        if "state_norm" not in name:  # the state statistics go on folding in each batch
            assert torch.allclose(final[name], tensor, atol=1e-6), name
    # a fresh policy of the same seed differs: the weights did come from the warm start
    fresh = build_policy(saved["spec"]).state_dict()
    assert not torch.allclose(fresh["encoder.cnn.0.weight"], final["encoder.cnn.0.weight"])
    if scheduler == "local":  # the saved policies in a user's loop: dict observations, text included
        _act_in_a_gymnasium_loop(run)
        res = invoke(host, "eval", str(run), "--warm-start", "-n", "1", "--json")
        assert res.exit_code == 0, res.output + repr(res.exception)
        assert json.loads(res.output)["episodes"] == 1


def _act_in_a_gymnasium_loop(run: Path) -> None:
    import gymnasium as gym

    from rlinf_algos import load_policy
    from rlinf_algos.envs import ensure_registered

    ensure_registered(ENV)
    env = gym.make(ENV, privileged=True, image_size=[32, 32])
    try:
        obs, _ = env.reset(seed=0)
        for policy in (load_policy(run), load_policy(run, warm_start=True)):
            assert policy.path.name in ("policy.safetensors", "warm_start.safetensors")
            action = policy.act(obs)
            assert action.shape == (3,) and env.action_space.contains(action)
            obs, *_ = env.step(action)
            batch = {k: ([v, v] if isinstance(v, str) else np.stack([v, v])) for k, v in obs.items()}
            assert policy.act(batch).shape == (2, 3)
    finally:
        env.close()


def test_warm_start_policy_writes_its_record(tmp_path: Path) -> None:
    opts = WarmStartConfig(frames=24, episode_steps=3, epochs=1, batch_size=8)
    lines: list[str] = []
    state, record = warm_start_policy(_spec(), _env(), opts, 0, tmp_path / "r", lines.append)
    assert (tmp_path / "r" / "warm_start.safetensors").exists()
    assert any("frames from" in line for line in lines) and any("epoch 1/1" in line for line in lines)
    assert set(state) == set(build_policy(_spec()).state_dict())
    assert record["frames"] == 24


def test_encoder_loss_auxiliary_keeps_rl_gradients_out_of_the_encoder() -> None:
    torch.manual_seed(0)
    spec = {**_spec(), "encoder_loss": "auxiliary"}
    model = build_policy(spec)
    raw, _, _ = collect_frames(_env(), WarmStartConfig(frames=8, episode_steps=4), seed=SEED_OFFSET)
    obs = model.normalize(raw)
    logp, _, value = model.evaluate(obs, torch.zeros(8, 3))
    (logp.sum() + value.sum()).backward()  # the policy and value losses
    assert all(p.grad is None or not p.grad.any() for p in model.encoder.parameters())
    assert model.actor_mean[0].weight.grad is not None
    model.auxiliary_loss().backward()  # the auxiliary loss does train it
    assert model.encoder.cnn[0].weight.grad.abs().sum() > 0
    # the prediction the heads read is standardised: after set_privileged_scale the loss is on
    # (entry - mean) / std
    mean, std = obs["privileged"].mean(0), obs["privileged"].std(0)
    model.set_privileged_scale(mean, std)
    model.evaluate(obs, torch.zeros(8, 3))
    want = (model.aux_head(model.encoder(obs)) - (obs["privileged"] - mean) / std.clamp(min=0.01)) ** 2
    assert torch.allclose(model.auxiliary_loss(), want.sum(-1).mean())
    with pytest.raises(ConfigError, match="predict_privileged"):
        build_policy({**spec, "predict_privileged": 0.0})
    from rlinf_algos.config import VLAModelConfig

    with pytest.raises(ValueError, match="encoder_loss"):
        VLAModelConfig(type="vla", encoder_loss="auxiliary")


def test_held_random_actions_take_the_arm_further() -> None:
    def reach(hold: int) -> float:
        raw, _, _ = collect_frames(
            _env(), WarmStartConfig(frames=64, episode_steps=8, action_hold=hold), seed=SEED_OFFSET
        )
        ee = raw["privileged"][:, :3] - raw["privileged"][:, 3:]  # the hand: target - (target - hand)
        return float(np.linalg.norm(ee - ee.mean(0), axis=1).mean())

    assert reach(8) > 1.3 * reach(1)


@pytest.mark.slow
def test_expert_actions_show_the_arm_at_the_named_cube() -> None:
    def offsets(**o: Any) -> np.ndarray:
        opts = WarmStartConfig(frames=160, episode_steps=20, **o)
        raw, _, _ = collect_frames(_env(), opts, seed=SEED_OFFSET)
        return np.linalg.norm(raw["privileged"][:, 3:], axis=1)  # the hand's distance to the target

    expert, random = offsets(actions="expert", expert_noise=0.1), offsets()
    assert np.mean(expert < 0.05) > 0.3 and np.mean(random < 0.05) < 0.1
    with pytest.raises(ConfigError, match="expert_action") as err:  # named where it is set
        collect_frames(
            SimpleNamespace(id="InvertedPendulum-v5", num_envs=1, kwargs={}, obs_mode="pixels+state",
                            image_size=(16, 16)),
            WarmStartConfig(frames=2, actions="expert"),
            seed=0,
        )  # fmt: skip
    assert err.value.problems[0].path == "model.warm_start.actions"


def test_image_shift_moves_the_images_of_a_batch_deterministically() -> None:
    from rlinf_algos.perception import shift_images

    g = torch.Generator().manual_seed(0)
    imgs = torch.randint(0, 256, (16, 32, 32, 3), dtype=torch.uint8, generator=g)
    batch = {"image": imgs, "image_wrist": imgs.flip(1), "state": torch.randn(16, 5)}
    keys = ["image", "image_wrist"]
    out = shift_images(batch, keys, 4, torch.Generator().manual_seed(1))
    again = shift_images(batch, keys, 4, torch.Generator().manual_seed(1))
    other = shift_images(batch, keys, 4, torch.Generator().manual_seed(2))
    for k in keys:
        assert out[k].shape == batch[k].shape and out[k].dtype == torch.uint8
        assert torch.equal(out[k], again[k]) and not torch.equal(out[k], other[k])
        moved = [not torch.equal(out[k][i], batch[k][i]) for i in range(16)]
        assert sum(moved) >= 12  # an offset per image: (0, 0) is one in 81
    assert out["state"] is batch["state"]  # only the images move
    # each camera gets its own offsets: the wrist image is not shifted like the table's
    assert not torch.equal(out["image_wrist"], out["image"].flip(1))
    # a shift is a crop of the edge-padded image: an interior window of the original reappears
    shifted = [
        i for i in range(16)
        if any(torch.equal(out["image"][i, 4:28, 4:28], imgs[i, 4 + dy : 28 + dy, 4 + dx : 28 + dx])
               for dy in range(-4, 5) for dx in range(-4, 5))
    ]  # fmt: skip
    assert len(shifted) == 16
    off = shift_images(batch, keys, 0, torch.Generator().manual_seed(1))
    assert all(off[k] is batch[k] for k in batch)


def test_warm_start_image_shift_is_used_and_checked() -> None:
    raw, scenes, _ = collect_frames(_env(), WarmStartConfig(frames=24, episode_steps=3), seed=SEED_OFFSET)

    def fit(**o: Any) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        model = build_policy(_spec())
        fit_perception(model, raw, WarmStartConfig(epochs=1, batch_size=8, **o), 0, None, scenes)
        return model.encoder.state_dict()

    plain, shifted, again = fit(), fit(image_shift=2), fit(image_shift=2)
    assert all(torch.equal(shifted[k], again[k]) for k in shifted)  # deterministic for a seed
    assert not torch.equal(plain["cnn.0.weight"], shifted["cnn.0.weight"])  # the shift changed the fit
    assert WarmStartConfig().image_shift == 0
    with pytest.raises(ConfigError, match="image_shift") as err:  # 32x32 frames: 16 is half
        fit(image_shift=16)
    assert err.value.problems[0].path == "model.warm_start.image_shift"
    from rlinf_algos.config import VLAModelConfig

    with pytest.raises(ValueError, match="image_shift"):
        VLAModelConfig(type="vla", predict_privileged=1.0, warm_start={"image_shift": -1})


def test_shuffled_actions_move_each_arm_as_another_scenes_demonstrator() -> None:
    # 4 sub-envs, frames in step order (frame t * 4 + i: sub-env i at step t), the same scenes
    # in both runs (the same seed); every arm starts at home
    def hands(actions: str) -> tuple[np.ndarray, np.ndarray]:
        opts = WarmStartConfig(frames=80, episode_steps=20, actions=actions, expert_noise=0.0)
        raw, _, _ = collect_frames(_env(), opts, seed=SEED_OFFSET)
        priv = raw["privileged"].reshape(20, 4, 6)
        return priv[..., :3] - priv[..., 3:], priv[..., 3:]  # the hand, and its offset to the target

    hand_e, offset_e = hands("expert")
    hand_s, offset_s = hands("shuffled")
    # the first step of sub-env i is the one its left neighbour's demonstrator takes from home
    np.testing.assert_allclose(hand_s[1], np.roll(hand_e[1], 1, axis=0), atol=2e-3)
    assert np.abs(hand_s[1] - hand_e[1]).max() > 0.01
    # so its arm moves, but not to its own target: the motion does not give the target away
    assert np.linalg.norm(hand_s[-1] - hand_s[0], axis=-1).min() > 0.1
    assert np.linalg.norm(offset_e[-1], axis=-1).max() < 0.05 < np.linalg.norm(offset_s[-1], axis=-1).min()
    with pytest.raises(ConfigError, match="num_envs") as err:
        collect_frames(_env(num_envs=1), WarmStartConfig(frames=4, actions="shuffled"), seed=0)
    assert err.value.problems[0].path == "model.warm_start.actions"


@pytest.mark.slow
def test_decoy_actions_hover_over_a_random_cube_of_the_scene() -> None:
    # 4 sub-envs, episodes of 20 steps, 8 episodes each: at an episode's last step every hand
    # hovers over one of its scene's cubes at the reach height, the named one only by chance
    opts = WarmStartConfig(frames=640, episode_steps=20, actions="decoy", expert_noise=0.0)
    raw, scenes, _ = collect_frames(_env(), opts, seed=SEED_OFFSET)
    last = raw["privileged"].reshape(8, 20, 4, 6)[:, -1]  # [episode, sub-env, 6]
    hand = last[..., :3] - last[..., 3:]
    assert np.abs(hand[..., 2] - 0.09).max() < 0.01  # every hand at the reach height (0.09 m)
    on_target = np.linalg.norm(last[..., 3:], axis=-1) < 0.02
    # 32 episodes, 4 cubes each: the named cube about a quarter of the time, never always
    assert 2 <= on_target.sum() <= 20, on_target.sum()
    again, _, _ = collect_frames(_env(), opts, seed=SEED_OFFSET)
    assert np.array_equal(raw["privileged"], again["privileged"])  # seeded
    assert np.unique(scenes).size == 32


def test_decoy_needs_candidate_actions() -> None:
    env = SimpleNamespace(id="Pendulum-v1", num_envs=2, kwargs={}, obs_mode="state", image_size=(64, 64))
    with pytest.raises(ConfigError, match="candidate_actions") as err:
        collect_frames(env, WarmStartConfig(frames=4, actions="decoy"), seed=0)
    assert err.value.problems[0].path == "model.warm_start.actions"
