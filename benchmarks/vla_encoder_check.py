"""Can the ``vla`` encoder find the named cube? A supervised check for issue 21.

Collects ``N`` resets of ``rlinf/FrankaInstructReach-v0`` (seeds 0..N-1), then trains the default
:class:`~rlinf_algos.models.vla.VLAEncoder` (CNN with FiLM and spatial softmax, hashed token
embedding) plus a small head to regress the named cube's (x, y) from the image, the instruction
and the state, on 90% of them; prints the held-out median error and the fraction within 5 cm per
epoch. It separates "the architecture cannot localise" from "RL has not found it yet".

    MUJOCO_GL=egl uv run python benchmarks/vla_encoder_check.py [N]

Recorded: benchmarks/results/vla_franka_reach_curve.json.
"""

import sys
import time

import gymnasium as gym
import numpy as np
import torch

from rlinf_algos.envs import ensure_registered
from rlinf_algos.models.vla import VLAEncoder
from rlinf_algos.obs import describe_space
from rlinf_algos.pixels import prepare_gl

ENV_ID = "rlinf/FrankaInstructReach-v0"


def main(n: int) -> None:
    prepare_gl()
    ensure_registered(ENV_ID)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    env = gym.make(ENV_ID)
    imgs, states, texts, targets = [], [], [], []
    t0 = time.time()
    for i in range(n):
        o, _ = env.reset(seed=i)
        imgs.append(o["image"])
        states.append(o["state"])
        texts.append(o["instruction"])
        targets.append(env.unwrapped.target[:2].copy())
    print(f"collected {n} resets in {time.time() - t0:.0f} s", flush=True)
    raw = {"image": np.stack(imgs), "state": np.stack(states), "instruction": np.array(texts)}
    y = torch.tensor(np.stack(targets), dtype=torch.float32)
    enc = VLAEncoder(
        describe_space(env.observation_space), {"channels": [32, 32, 32]}, {"dim": 32}, None, False
    )
    head = torch.nn.Sequential(torch.nn.Linear(enc.out_dim, 128), torch.nn.ReLU(), torch.nn.Linear(128, 2))
    prep = enc.prepare(raw)
    opt = torch.optim.Adam([*enc.parameters(), *head.parameters()], 1e-3)
    n_train = int(0.9 * n)
    y_mean = y[:n_train].mean(0)
    for epoch in range(30):
        perm = torch.randperm(n_train)
        for b in range(0, n_train, 128):
            idx = perm[b : b + 128]
            batch = {k: v[idx] for k, v in prep.items()}
            loss = ((head(enc(batch)) - (y[idx] - y_mean)) ** 2).sum(1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            held = {k: v[n_train:] for k, v in prep.items()}
            err = (head(enc(held)) + y_mean - y[n_train:]).norm(dim=1)
        print(
            f"epoch {epoch}: held-out median error {100 * err.median():.1f} cm, within 5 cm "
            f"{(err < 0.05).float().mean():.2f} ({time.time() - t0:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
