"""Dict observations (camera images, state, instruction) through the embodied pipeline, the
``vla`` model type, and ``rlinf eval``'s success rates and videos.

Real components: MuJoCo renders offscreen through EGL (``MUJOCO_GL=egl``), the direct links are
real sockets, and the encoder folders are real ``transformers`` models (built here from a config
and a tokenizer trained here, since nothing can be downloaded)."""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from rlinf_algos import obs as obs_tree
from rlinf_algos.envs import VectorEnvStepper
from rlinf_algos.models import build_policy
from rlinf_algos.models.vla import hash_tokens, random_shift
from rlinf_algos.replay import ReplayBuffer
from rlinf_algos.safe_state import load_state
from rlinf_scheduler.link import Link

os.environ.setdefault("MUJOCO_GL", "egl")

ENV = "InvertedPendulum-v5"


def pixel_stepper(seed: int = 0, n: int = 2, mode: str = "pixels+state") -> VectorEnvStepper:
    return VectorEnvStepper(ENV, n, seed, obs_mode=mode, image_size=(32, 40))


def test_pixel_observations_are_uint8_images_and_a_state_vector() -> None:
    st = pixel_stepper()
    try:
        assert set(st.obs) == {"image", "state"}
        assert st.obs["image"].shape == (2, 32, 40, 3) and st.obs["image"].dtype == np.uint8
        assert st.obs["state"].shape == (2, 4) and st.obs["state"].dtype == np.float32
        assert st.obs["image"].std() > 0  # a real frame, not a blank buffer
        spaces = st.spaces()
        assert spaces["obs_space"]["keys"]["image"] == {"kind": "box", "shape": [32, 40, 3], "dtype": "uint8"}
        assert spaces["obs_dim"] == 4
        step = st.step(np.zeros((2, 1), np.float32))
        assert step.obs["image"].dtype == np.uint8
    finally:
        st.close()


def test_rendering_is_deterministic_for_a_seed() -> None:
    frames = []
    for _ in range(2):
        st = pixel_stepper(seed=5, mode="pixels")
        try:
            assert set(st.obs) == {"image"}
            out = [st.obs["image"].copy()]
            for t in range(3):
                out.append(st.step(np.full((2, 1), 0.3 * (t - 1), np.float32)).obs["image"].copy())
            frames.append(np.stack(out))
        finally:
            st.close()
    assert np.array_equal(frames[0], frames[1])
    other = pixel_stepper(seed=6, mode="pixels")
    try:
        assert not np.array_equal(other.obs["image"], frames[0][0])
    finally:
        other.close()


def test_final_observations_of_dict_envs_are_the_last_frame() -> None:
    st = VectorEnvStepper(ENV, 2, 0, obs_mode="pixels+state", image_size=(16, 16), max_episode_steps=2)
    try:
        st.step(np.zeros((2, 1), np.float32))
        step = st.step(np.zeros((2, 1), np.float32))
        assert step.truncated.all()
        # the next episode's first observation differs from the finished episode's last one
        assert not np.array_equal(step.final_obs["state"], step.obs["state"])
        assert step.final_obs["image"].dtype == np.uint8
    finally:
        st.close()


def test_a_camera_that_cannot_render_names_mujoco_gl(tmp_path: Path) -> None:
    code = (
        "from rlinf_algos.envs import VectorEnvStepper\n"
        "from rlinf_core.errors import ConfigError\n"
        "try:\n"
        "    VectorEnvStepper('InvertedPendulum-v5', 1, 0, obs_mode='pixels')\n"
        "except ConfigError as err:\n"
        "    print('CONFIG-ERROR', err)\n"
        "except Exception as err:\n"
        "    print('OTHER', type(err).__name__, err)\n"
    )
    env = {**os.environ, "MUJOCO_GL": "no-such-backend"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    text = out.stdout + out.stderr
    assert "MUJOCO_GL" in text and "egl" in text, text


def test_dict_observations_cross_a_link_bit_for_bit() -> None:
    a, b = socket.socketpair()
    env_side, rollout_side = Link(a, 5.0, "rollout rank 0"), Link(b, 5.0, "env rank 0")
    rng = np.random.default_rng(0)
    obs = {
        "image": rng.integers(0, 256, (3, 24, 24, 3), dtype=np.uint8),
        "state": rng.standard_normal((3, 7)).astype(np.float32),
        "instruction": np.array(["reach the red cube", "reach the blue cube", "reach the green cube"]),
    }
    msg = {"obs": obs, "rew": np.ones(3, np.float32)}
    part = {k: obs_tree.take(v, slice(1, 3)) for k, v in msg.items()}  # an env worker's shard
    env_side.send((0, part))
    stage, got = rollout_side.recv()
    assert stage == 0
    for k in obs:
        assert got["obs"][k].dtype == obs[k].dtype
        assert np.array_equal(got["obs"][k], obs[k][1:3])
    # and as a channel item (pickled once by the producer)
    again = pickle.loads(pickle.dumps(obs_tree.concat([part["obs"], part["obs"]]), protocol=5))
    assert again["image"].dtype == np.uint8 and np.array_equal(again["image"][:2], obs["image"][1:])
    env_side.close()
    rollout_side.close()


def test_replay_buffer_keeps_dict_observations() -> None:
    shape = {"image": ((8, 8, 3), np.uint8), "state": ((2,), np.float32), "instruction": ((), "<U32")}
    buf = ReplayBuffer(4, shape, (1,), seed=0)
    obs = {
        "image": np.full((3, 8, 8, 3), 7, np.uint8),
        "state": np.ones((3, 2), np.float32),
        "instruction": np.array(["a", "b", "reach the red cube"]),
    }
    z = np.zeros(3, np.float32)
    buf.add(obs, np.zeros((3, 1), np.float32), z, obs, z.astype(bool), z.astype(bool))
    buf.add(obs, np.zeros((3, 1), np.float32), z, obs, z.astype(bool), z.astype(bool))
    assert len(buf) == 4
    batch = buf.sample(5)
    assert batch.obs["image"].dtype == np.uint8 and batch.obs["instruction"].dtype.kind == "U"
    state = buf.state_dict()
    other = ReplayBuffer(4, shape, (1,), seed=0)
    other.load_state_dict(state)
    assert np.array_equal(other.obs["instruction"], buf.obs["instruction"])
    with pytest.raises(ValueError, match="image"):
        buf.add(
            {**obs, "image": obs["image"][:, :4]}, np.zeros((3, 1)), z, obs, z.astype(bool), z.astype(bool)
        )


def test_hash_tokens_and_random_shift() -> None:
    ids = hash_tokens("Reach the RED cube!", 64, 8)
    assert ids == hash_tokens("reach the red cube", 64, 8) and len(ids) == 4 and min(ids) >= 1
    colours = ["red", "green", "blue", "yellow", "purple", "orange"]  # distinct at the default size
    assert len({hash_tokens(c, 1024, 1)[0] for c in colours}) == len(colours)
    img = torch.arange(2 * 6 * 6 * 3, dtype=torch.uint8).reshape(2, 6, 6, 3)
    g = torch.Generator().manual_seed(0)
    out = random_shift(img, 2, g)
    assert out.shape == img.shape and out.dtype == torch.uint8
    assert torch.equal(random_shift(img, 0), img)


SPACE = {
    "kind": "dict",
    "keys": {
        "image": {"kind": "box", "shape": [32, 32, 3], "dtype": "uint8"},
        "state": {"kind": "box", "shape": [5], "dtype": "float32"},
        "instruction": {"kind": "text", "max_length": 64},
    },
}


def raw_batch(n: int = 4) -> dict[str, Any]:
    rng = np.random.default_rng(1)
    return {
        "image": rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
        "state": rng.standard_normal((n, 5)).astype(np.float32),
        "instruction": np.array(["reach the red cube", "reach the blue cube"] * (n // 2)),
    }


def test_vla_actor_critic_prepares_and_evaluates_consistently() -> None:
    torch.manual_seed(0)
    model = build_policy({"type": "vla", "cls": "GaussianActorCritic", "obs_space": SPACE, "act_dim": 3})
    raw = raw_batch()
    prepared = model.normalize(raw)
    assert prepared["image"].dtype == torch.uint8 and prepared["instruction"].dtype == torch.int64
    buf = obs_tree.to_torch(obs_tree.alloc(obs_tree.to_numpy(prepared), (4,)))
    model.normalizer()(raw, buf)
    assert all(torch.equal(buf[k], prepared[k]) for k in prepared)
    actions = torch.zeros(4, 3)
    logp, _ent, value = model.evaluate(prepared, actions)
    assert logp.shape == (4,) and value.shape == (4,)
    # the instruction changes the action: the language conditions the policy
    swapped = {**raw, "instruction": raw["instruction"][::-1].copy()}
    with torch.no_grad():
        for p in model.actor_mean.parameters():  # a non-trivial head
            p.normal_(0, 0.5)
        a1, a2 = model.predict(raw), model.predict(swapped)
    assert not torch.allclose(a1, a2)
    counts = model.parameter_counts()
    assert counts["trainable"] == counts["total"] > 0


def test_each_camera_has_keypoints_of_its_own_that_find_a_bright_spot() -> None:
    """The CNN sees each camera's image on its own: a camera's keypoints move with its image and
    no other; and the spatial softmax (on the maps before any activation, with a learnt
    temperature) places a channel that responds to a bright spot at that spot."""
    from rlinf_algos.models.vla import SpatialSoftmax, VLAEncoder

    space = {"kind": "dict", "keys": {**SPACE["keys"], "image_wrist": SPACE["keys"]["image"]}}
    torch.manual_seed(0)
    enc = VLAEncoder(space, vision={"channels": [8, 8]})
    raw = {
        **raw_batch(2),
        "image_wrist": np.random.default_rng(2).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8),
    }
    with torch.no_grad():
        base = enc(enc.prepare(raw))
        moved = enc(enc.prepare({**raw, "image_wrist": raw["image_wrist"][:, ::-1].copy()}))
    kp = 2 * 8  # (x, y) per channel, per camera: the table camera's first, then the wrist's
    assert base.shape[1] == 2 * kp + enc.lang_dim + enc.state_dim
    assert torch.equal(base[:, :kp], moved[:, :kp])  # the table camera's keypoints did not move
    assert not torch.allclose(base[:, kp : 2 * kp], moved[:, kp : 2 * kp])

    ssm = SpatialSoftmax(9, 9, 1)
    maps = torch.zeros(1, 1, 9, 9)
    maps[0, 0, 6, 2] = 1.0  # a weak response at column 2, row 6: x = -0.5, y = 0.5
    with torch.no_grad():
        soft = ssm(maps)[0]
        ssm.log_inv_temp.fill_(3.0)  # a sharper softmax: the learnt temperature
        sharp = ssm(maps)[0]
    assert soft.abs().max() < 0.05  # one unit over 80 zeros: near the centre
    assert torch.allclose(sharp, torch.tensor([-0.5, 0.5]), atol=0.01)


def _text_and_vision_folders(tmp: Path) -> tuple[Path, Path]:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast, ViTConfig, ViTModel

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        ["reach the red cube", "reach the blue cube", "reach the green cube"],
        trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]),
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]")
    text = tmp / "text"
    BertModel(
        BertConfig(
            vocab_size=fast.vocab_size,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
        )
    ).save_pretrained(text)
    fast.save_pretrained(text)
    vision = tmp / "vision"
    ViTModel(
        ViTConfig(
            image_size=32,
            patch_size=8,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
        )
    ).save_pretrained(vision)
    return text, vision


def test_encoder_folders_and_lora_trainable_parameters(tmp_path: Path) -> None:
    text, vision = _text_and_vision_folders(tmp_path)
    spec = {
        "type": "vla",
        "cls": "GaussianActorCritic",
        "obs_space": SPACE,
        "act_dim": 3,
        "vision": {"path": str(vision)},
        "language": {"path": str(text), "dim": 16, "max_tokens": 8},
    }
    full = build_policy(spec)
    lora = build_policy(
        {
            **spec,
            "lora": {
                "rank": 4,
                "alpha": 8.0,
                "dropout": 0.0,
                "target_modules": ["query", "value", "q_proj", "v_proj"],
            },
        }
    )
    f, lo = full.parameter_counts(), lora.parameter_counts()
    assert f["trainable"] == f["total"]

    def encoder_params(model: Any, trainable: bool) -> int:
        return sum(
            p.numel()
            for n, p in model.named_parameters()
            if ("text_model" in n or "vision_model" in n) and (p.requires_grad or not trainable)
        )

    # the encoders' own weights are frozen: only their adapters train
    assert encoder_params(lora, True) < encoder_params(full, True) / 5
    assert lo["trainable"] == f["trainable"] - encoder_params(full, True) + encoder_params(lora, True)
    names = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert any("lora_" in n for n in names) and any(n.startswith("actor_mean") for n in names)
    assert not any("lora_" not in n and ("text_model" in n or "vision_model" in n) for n in names)
    raw = raw_batch()
    logp, _, value = lora.evaluate(lora.normalize(raw), torch.zeros(4, 3))
    (logp.sum() + value.sum()).backward()
    grads = [p.grad for n, p in lora.named_parameters() if "lora_B" in n]
    assert grads and all(g is not None for g in grads)


def test_a_vla_policy_refuses_vector_observations() -> None:
    from rlinf_core.errors import ConfigError

    with pytest.raises(ConfigError, match="obs_mode"):
        build_policy(
            {
                "type": "vla",
                "cls": "GaussianActorCritic",
                "obs_space": {"kind": "box", "shape": [4], "dtype": "float32"},
                "act_dim": 1,
            }
        )


def _config(tmp: Path, algorithm: dict[str, Any], steps: int) -> Path:
    cfg = {
        "algorithm": algorithm,
        "env": {"id": ENV, "num_envs": 2, "obs_mode": "pixels+state", "image_size": [24, 24]},
        "model": {"type": "vla", "hidden_sizes": [32]},
        "runner": {"total_steps": steps, "seed": 3, "scheduler": "local", "torch_threads": 1},
    }
    path = tmp / f"{algorithm['name']}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_ppo_trains_a_vla_policy_and_eval_reproduces_with_videos(
    tmp_path: Path, host: Any, invoke: Any
) -> None:
    algo = {"name": "ppo", "rollout_steps": 16, "minibatch_size": 16, "update_epochs": 1}
    run = tmp_path / "run"
    res = invoke(host, "train", str(_config(tmp_path, algo, 64)), "--run-dir", str(run), "--quiet")
    assert res.exit_code == 0, res.output + repr(res.exception)
    params = json.loads((run / "summary.json").read_text())["parameters"]
    assert 0 < params["trainable"] == params["total"]
    record = load_state(run / "policy.safetensors")
    assert record["obs_mode"] == "pixels+state" and record["image_size"] == [24, 24]
    outs = []
    for _ in range(2):
        res = invoke(host, "eval", str(run), "-n", "3", "--seed", "7", "--json")
        assert res.exit_code == 0, res.output + repr(res.exception)
        outs.append(json.loads(res.output))
    assert outs[0] == outs[1]
    assert [e["seed"] for e in outs[0]["per_episode"]] == [7, 8, 9]
    res = invoke(host, "eval", str(run), "-n", "2", "--video", str(tmp_path / "videos"))
    assert res.exit_code == 0, res.output + repr(res.exception)
    files = sorted((tmp_path / "videos").iterdir())
    assert len(files) == 2 and files[0].name.startswith("episode000_seed10000")
    assert files[0].stat().st_size > 100


def test_sac_trains_a_vla_policy_with_image_shift(tmp_path: Path, host: Any, invoke: Any) -> None:
    algo = {"name": "sac", "batch_size": 8, "learning_starts": 16, "buffer_size": 200, "image_shift": 2}
    run = tmp_path / "run"
    res = invoke(host, "train", str(_config(tmp_path, algo, 40)), "--run-dir", str(run), "--quiet")
    assert res.exit_code == 0, res.output + repr(res.exception)
    res = invoke(host, "eval", str(run), "-n", "1", "--json")
    assert res.exit_code == 0 and json.loads(res.output)["episodes"] == 1


@pytest.mark.parametrize(
    ("algorithm", "model", "where"),
    [
        ({"name": "ppo"}, {"type": "mlp"}, "model.type"),
        ({"name": "grpo", "group_size": 2, "num_groups": 1}, {"type": "vla"}, "algorithm.name"),
    ],
)
def test_what_cannot_take_dict_observations_says_so(
    tmp_path: Path, host: Any, invoke: Any, algorithm: dict[str, Any], model: dict[str, Any], where: str
) -> None:
    cfg = {
        "algorithm": algorithm,
        "env": {
            "id": ENV,
            "num_envs": 2,
            "obs_mode": "pixels",
            "image_size": [16, 16],
            "max_episode_steps": 5,
        },
        "model": model,
        "runner": {"total_steps": 10, "scheduler": "local"},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = invoke(host, "train", str(path), "--run-dir", str(tmp_path / "run"), "--quiet")
    from rlinf_core.errors import ConfigError

    assert isinstance(res.exception, ConfigError), res.output + repr(res.exception)
    assert where in str(res.exception)


PRIVILEGED_SPACE = {
    "kind": "dict",
    "keys": {**SPACE["keys"], "privileged": {"kind": "box", "shape": [6], "dtype": "float32"}},
}


def _privileged_policy(**option: Any) -> tuple[Any, dict[str, Any]]:
    """A vla actor-critic on PRIVILEGED_SPACE with ``option`` (seeded), and a raw batch."""
    torch.manual_seed(0)
    spec = {
        "type": "vla",
        "cls": "GaussianActorCritic",
        "obs_space": PRIVILEGED_SPACE,
        "act_dim": 3,
        **option,
    }
    raw = {**raw_batch(), "privileged": np.random.default_rng(2).standard_normal((4, 6)).astype(np.float32)}
    return build_policy(spec), raw


def test_a_privileged_critic_reads_the_privileged_entry_and_the_policy_does_not() -> None:
    model, raw = _privileged_policy(critic_input="privileged")
    prepared = model.normalize(raw)
    assert torch.equal(prepared["privileged"], torch.from_numpy(raw["privileged"]))
    buf = obs_tree.to_torch(obs_tree.alloc(obs_tree.to_numpy(prepared), (4,)))
    model.normalizer()(raw, buf)
    assert all(torch.equal(buf[k], prepared[k]) for k in prepared)
    actions = torch.zeros(4, 3)
    logp, _, value = model.evaluate(prepared, actions)
    # the value changes with the privileged entry, the policy does not
    other = {**prepared, "privileged": prepared["privileged"] + 1.0}
    logp2, _, value2 = model.evaluate(other, actions)
    assert torch.equal(logp, logp2) and not torch.allclose(value, value2)
    # the value head does not reach into the encoder: the encoder learns from the policy loss
    value.sum().backward()
    assert all(p.grad is None for p in model.encoder.parameters())
    assert model.critic[0].in_features == 5 + 6
    # acting without the privileged entry (a real arm, evaluation) works
    without = {k: v for k, v in raw.items() if k != "privileged"}
    assert model.predict(without).shape == (4, 3)


def test_a_privileged_critic_needs_the_entry_and_ppo() -> None:
    from rlinf_algos.models import check_policy_spec
    from rlinf_core.errors import ConfigError

    spec = {"type": "vla", "cls": "GaussianActorCritic", "obs_space": SPACE, "act_dim": 3}
    with pytest.raises(ConfigError, match=r"env\.kwargs\.privileged") as err:
        check_policy_spec({**spec, "critic_input": "privileged"})
    assert err.value.problems[0].path == "model.critic_input"
    with pytest.raises(ConfigError, match="privileged"):
        build_policy({**spec, "critic_input": "privileged"})


def test_ppo_trains_with_a_privileged_critic_on_the_instruct_task(
    tmp_path: Path, host: Any, invoke: Any
) -> None:
    pytest.importorskip("rlinf_hw_franka", reason="rlinf/FrankaInstructReach-v0 comes with rlinf-hw-franka")
    cfg = {
        "algorithm": {"name": "ppo", "rollout_steps": 8, "minibatch_size": 16, "update_epochs": 1},
        "env": {
            "id": "rlinf/FrankaInstructReach-v0",
            "num_envs": 2,
            "kwargs": {"privileged": True, "image_size": [32, 32]},
        },
        "model": {
            "type": "vla",
            "hidden_sizes": [32],
            "critic_input": "privileged",
            "predict_privileged": 1.0,
        },
        "runner": {"total_steps": 32, "seed": 1, "scheduler": "local", "torch_threads": 1},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    res = invoke(host, "train", str(path), "--run-dir", str(run), "--quiet")
    assert res.exit_code == 0, res.output + repr(res.exception)
    res = invoke(host, "eval", str(run), "-n", "1", "--json")
    assert res.exit_code == 0, res.output + repr(res.exception)
    header = (run / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "aux_loss" in header
    # SAC has no auxiliary loss: the option is refused, naming it
    cfg["algorithm"] = {"name": "sac", "batch_size": 8, "learning_starts": 8}
    path.write_text(yaml.safe_dump(cfg))
    res = invoke(host, "train", str(path), "--run-dir", str(tmp_path / "sac0"), "--quiet")
    assert "model.predict_privileged" in str(res.exception), res.output + repr(res.exception)
    cfg["model"].pop("predict_privileged")
    # SAC: the twin critics read the state and the privileged entry, with no encoder of their own
    cfg["algorithm"] = {"name": "sac", "batch_size": 8, "learning_starts": 8, "image_shift": 2}
    path.write_text(yaml.safe_dump(cfg))
    res = invoke(host, "train", str(path), "--run-dir", str(tmp_path / "sac"), "--quiet")
    assert res.exit_code == 0, res.output + repr(res.exception)
    spec = {"type": "vla", "obs_space": PRIVILEGED_SPACE, "act_dim": 3, "critic_input": "privileged"}
    q = build_policy({**spec, "cls": "TwinQ"})
    assert q.encoder is None
    raw = {**raw_batch(), "privileged": np.zeros((4, 6), np.float32)}
    actor = build_policy(
        {**spec, "cls": "SquashedGaussianActor", "action_low": [-1] * 3, "action_high": [1] * 3}
    )
    assert q(actor.normalize(raw), torch.zeros(4, 3)).shape[-1] == 4


def test_predict_privileged_adds_an_auxiliary_loss_that_trains_the_encoder() -> None:
    model, raw = _privileged_policy(predict_privileged=5.0)
    obs = model.normalize(raw)
    with torch.no_grad():  # acting and evaluating without gradients leave no auxiliary loss
        model.evaluate(obs, torch.zeros(4, 3))
    assert model.auxiliary_loss() is None
    model.evaluate(obs, torch.zeros(4, 3))
    aux = model.auxiliary_loss()
    want = 5.0 * (model.aux_head(model.encoder(obs)) - obs["privileged"]).square().sum(-1).mean()
    assert aux is not None and torch.allclose(aux, want)
    assert model.auxiliary_loss() is None  # taken once
    aux.backward()
    assert model.encoder.cnn[0].weight.grad is not None and model.critic[0].weight.grad is None
    from rlinf_core.errors import ConfigError

    with pytest.raises(ConfigError, match="predict_privileged"):
        build_policy({"type": "vla", "cls": "GaussianActorCritic", "obs_space": SPACE, "act_dim": 3,
                      "predict_privileged": 5.0})  # fmt: skip
