"""SAC's learner: twin critics with Polyak targets, a squashed Gaussian actor, a learnt temperature,
and three update orders (one thread, two in lockstep, or two pipelined an update apart)."""

from __future__ import annotations

import copy
import math
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import torch
from torch import Tensor

from rlinf_algos.models.mlp import SquashedGaussianActor, TwinQ
from rlinf_algos.models.vla import shift_images
from rlinf_algos.optim import LeanAdam, make_adam
from rlinf_algos.replay import ReplayBatch
from rlinf_algos.sac import functional as F
from rlinf_algos.sac.config import SACConfig
from rlinf_core.errors import RlinfError

__all__ = ["SACLearner"]


class SACLearner:
    """The learner side of SAC: twin critics with Polyak-averaged targets, a squashed Gaussian
    actor, and a temperature learnt towards ``target_entropy``. :meth:`update` does one gradient
    step on a :class:`ReplayBatch`.

    ``cfg.update_order`` picks which critic the actor step sees. ``sequential`` (CleanRL, SB3):
    the critic as updated by this step's critic step. ``simultaneous`` (the SAC authors'
    softlearning, rlkit): the critic as it was when the step began, so neither step waits for the
    other and the actor and temperature step runs on a second thread while the critic step runs
    on the caller's; each reads a snapshot of the other's networks taken at the start, and the
    second thread draws its noise from a generator of its own (saved in :meth:`state_dict`), so
    runs stay reproducible. ``pipelined``: as ``simultaneous``, but update ``k``'s critic step
    uses the actor (and temperature) after actor step ``k - 2`` and its actor step the critic
    after critic step ``k - 2``, one update older; the two threads then only wait for each
    other when one falls a whole update behind (see :class:`_SACPipeline`), and results do not
    depend on their timing.

    Whoever acts with the policy reads it through :meth:`policy` (version :attr:`version`): in
    ``pipelined`` mode the live actor belongs to the second thread.
    """

    def __init__(
        self, actor: SquashedGaussianActor, critic: TwinQ, cfg: SACConfig, device: str | torch.device = "cpu"
    ) -> None:
        self.cfg, self.device = cfg, torch.device(device)
        self.actor = actor.to(self.device)
        self.critic = critic.to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.nn.Parameter(torch.tensor(math.log(cfg.init_alpha), device=self.device))
        self.target_entropy = (
            cfg.target_entropy if cfg.target_entropy is not None else F.default_target_entropy(actor.act_dim)
        )
        self.actor_opt = make_adam(self.actor.parameters(), cfg.actor_lr)
        self.critic_opt = make_adam(self.critic.parameters(), cfg.critic_lr)
        self.alpha_opt = make_adam([self.log_alpha], cfg.alpha_lr)
        self._actor_adam, self._critic_adam, self._alpha_adam = (
            LeanAdam(o) for o in (self.actor_opt, self.critic_opt, self.alpha_opt)
        )
        self._critic_params = list(self.critic.parameters())
        self.simultaneous = cfg.update_order == "simultaneous"
        self.pipelined = cfg.update_order == "pipelined"
        if self.simultaneous or self.pipelined:  # the actor step's thread draws its own noise
            self.side_generator = torch.Generator(self.device)
            self.side_generator.manual_seed(int(torch.randint(0, 2**62, (1,), device="cpu").item()))
        if self.simultaneous:
            # snapshots: the actor for the critic target, the critic for the actor loss
            self._actor_view = copy.deepcopy(self.actor).requires_grad_(False)
            self._critic_view = copy.deepcopy(self.critic).requires_grad_(False)
            self._actor_pairs = (list(self._actor_view.parameters()), list(self.actor.parameters()))
            self._critic_pairs = (list(self._critic_view.parameters()), self._critic_params)
            self._side: ThreadPoolExecutor | None = None  # the actor step's thread, started on first use
        if self.pipelined:
            self._pipe = _SACPipeline(self)
        self.aug_generator = torch.Generator().manual_seed(
            int(torch.randint(0, 2**62, (1,), device="cpu").item())
        )
        self.updates = 0
        self._version = 0

    @property
    def alpha(self) -> Tensor:
        return self.log_alpha.detach().exp()

    @property
    def version(self) -> int:
        """The version of :meth:`policy`: actor steps taken (``pipelined``: the newest actor the
        pipeline has promised, one update behind)."""
        return max(self.updates - 1, 0) if self.pipelined else self._version

    def policy(self) -> SquashedGaussianActor:
        """The actor at :attr:`version`, to act with or publish. ``pipelined``: a copy, taken
        (after waiting for its actor step if it is still running) from the pipeline."""
        return self._pipe.policy() if self.pipelined else self.actor

    def sync(self) -> None:
        """Wait for an actor step still running (``pipelined``), so :attr:`actor` is the newest."""
        if self.pipelined:
            self._pipe.drain()

    def _obs(self, raw: Any) -> Any:
        """A batch of stored observations as the networks take them: a float32 tensor, or for
        dict observations the actor's prepared dict with every image randomly shifted by up to
        ``image_shift`` pixels (DrQ; a fresh shift per image and per call)."""
        dev = self.device
        if not isinstance(raw, dict):
            return torch.from_numpy(raw).to(dev, torch.float32)
        out = self.actor.normalize(raw)
        images = [k for k in out if k.startswith("image")]
        out = shift_images(out, images, self.cfg.image_shift, self.aug_generator)
        return {k: v.to(dev) for k, v in out.items()}

    def _tensors(self, batch: ReplayBatch) -> tuple[Any, ...]:
        dev = self.device
        return (
            self._obs(batch.obs),
            torch.from_numpy(batch.actions).to(dev),
            torch.from_numpy(batch.rewards).to(dev),
            self._obs(batch.next_obs),
            torch.from_numpy(batch.terminated).to(dev),
        )

    def _critic_step(
        self, t: tuple[Tensor, ...], alpha: Tensor, actor: SquashedGaussianActor
    ) -> dict[str, Tensor]:
        obs, actions, rewards, next_obs, terminated = t
        with torch.no_grad():
            next_a, next_logp = actor.sample(next_obs)
            next_q = self.critic_target(next_obs, next_a)
            target = F.critic_target(
                rewards, terminated, next_q[0], next_q[1], next_logp, alpha, self.cfg.gamma
            )
        q = self.critic(obs, actions)
        q_loss = F.critic_loss(q[0], q[1], target)
        self._critic_adam.zero_grad()
        q_loss.backward()
        self._critic_adam.step()
        return {"critic_loss": q_loss.detach(), "q_mean": q.detach().mean()}

    def _actor_step(
        self, obs: Tensor, alpha: Tensor, critic: TwinQ, generator: torch.Generator | None
    ) -> dict[str, Tensor]:
        """The actor step against ``critic`` (the live critic, frozen meanwhile, or a snapshot
        without gradient), then the temperature step."""
        live = critic is self.critic
        if live:
            for p in self._critic_params:
                p.requires_grad_(False)
        a, logp = self.actor.sample(obs, generator)
        q_pi = critic(obs, a)
        a_loss = F.actor_loss(q_pi[0], q_pi[1], logp, alpha)
        self._actor_adam.zero_grad()
        a_loss.backward()
        self._actor_adam.step()
        if live:
            for p in self._critic_params:
                p.requires_grad_(True)
        out = {"actor_loss": a_loss.detach(), "entropy": -logp.detach().mean()}
        if self.cfg.autotune:
            t_loss = F.temperature_loss(self.log_alpha, logp, self.target_entropy)
            self._alpha_adam.zero_grad()
            t_loss.backward()
            self._alpha_adam.step()
            out["alpha_loss"] = t_loss.detach()
        return out

    def update(self, batch: ReplayBatch) -> dict[str, Tensor]:
        """One critic step (and, every ``actor_update_interval`` updates, one actor and one
        temperature step); returns detached scalar tensors (no host sync)."""
        cfg = self.cfg
        t = self._tensors(batch)
        if self.pipelined:
            out = self._pipe.update(t)
            self.updates += 1
        else:
            out = self._steps_in_lockstep(t)
        if self.updates % cfg.target_update_interval == 0:
            F.polyak_update(self.critic_target.parameters(), self._critic_params, cfg.tau)
        if self.pipelined:
            self._pipe.critic_done(self.updates)
        return out

    def _steps_in_lockstep(self, t: tuple[Tensor, ...]) -> dict[str, Tensor]:
        """The critic step and, on actor turns, the actor step of ``sequential`` and
        ``simultaneous`` (both done when this returns)."""
        cfg = self.cfg
        alpha = self.alpha
        self.updates += 1
        actor_turn = self.updates % cfg.actor_update_interval == 0
        if actor_turn and self.simultaneous:
            with torch.no_grad():
                torch._foreach_copy_(*self._actor_pairs)
                torch._foreach_copy_(*self._critic_pairs)
            if self._side is None:
                threads = torch.get_num_threads()  # OpenMP's thread count is per thread
                self._side = ThreadPoolExecutor(1, "sac-actor-step", lambda: torch.set_num_threads(threads))
            job = self._side.submit(self._actor_step, t[0], alpha, self._critic_view, self.side_generator)
            try:
                out = self._critic_step(t, alpha, self._actor_view)
            finally:
                try:
                    actor_out = job.result(timeout=600.0)
                except FutureTimeout:
                    raise RlinfError("SAC: the actor step gave no result in 600 s") from None
            out.update(actor_out)
        else:
            out = self._critic_step(t, alpha, self.actor)
            if actor_turn:
                out.update(self._actor_step(t[0], alpha, self.critic, None))
        if actor_turn:
            self._version += 1
        out["alpha"] = alpha
        return out

    def close(self) -> None:
        """Stop the second thread (``simultaneous``, ``pipelined``); the learner still works
        after (it starts a new one)."""
        if self.simultaneous and self._side is not None:
            self._side.shutdown(wait=True)
            self._side = None
        if self.pipelined:
            self._pipe.close()

    def state_dict(self) -> dict[str, Any]:
        if self.pipelined:
            self._pipe.drain()
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(),
            "updates": self.updates,
            "version": self.version,
            **({"side_rng": self.side_generator.get_state()} if self.simultaneous or self.pipelined else {}),
            **({"pipeline": self._pipe.state_dict()} if self.pipelined else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])
        for adam in (self._actor_adam, self._critic_adam, self._alpha_adam):
            adam.refresh()
        self.updates = int(state["updates"])
        self._version = int(state["version"])
        if (self.simultaneous or self.pipelined) and "side_rng" in state:
            self.side_generator.set_state(state["side_rng"])
        if self.pipelined:
            self._pipe.load_state_dict(state.get("pipeline"))


class _SACPipeline:
    """The two threads of ``update_order: pipelined``.

    Update ``k``: the caller's thread runs the critic step against the actor and temperature
    after actor step ``k - 2``; a second thread runs actor step ``k`` (and the temperature
    step) against the critic after critic step ``k - 2``. Each thread copies its networks into
    a ring of ``RING`` snapshots after its step, so the other reads a copy nobody writes. The
    caller waits only for actor step ``k - 2`` before critic step ``k``, the second thread only
    for critic step ``k - 2`` before actor step ``k``: either may run a whole update ahead of
    the other before it waits. With at most one update between them, the slots in use are
    ``k - 2 .. k + 2`` of whichever ``k`` the caller is on, hence a ring of 6 (5 would do).
    """

    RING = 6
    TIMEOUT_S = 600.0

    def __init__(self, learner: SACLearner) -> None:
        self.learner = learner
        self.actors = [copy.deepcopy(learner.actor).requires_grad_(False) for _ in range(self.RING)]
        self.critics = [copy.deepcopy(learner.critic).requires_grad_(False) for _ in range(self.RING)]
        self.alphas = [learner.alpha.clone() for _ in range(self.RING)]
        self._actor_slots = [list(a.parameters()) for a in self.actors]
        self._critic_slots = [list(c.parameters()) for c in self.critics]
        self._actor_params = list(learner.actor.parameters())
        self._policy = copy.deepcopy(learner.actor).requires_grad_(False)  # what policy() hands out
        self._cv = threading.Condition()
        self._jobs: queue.SimpleQueue[tuple[int, Tensor] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._actor_out: dict[str, Tensor] = {}
        self.actor_k = 0  # actor steps done (the second thread's progress)
        self.critic_k = 0  # critic steps done (the caller's)

    def _slot(self, k: int) -> int:
        return max(k, 0) % self.RING

    def _wait(self, side: str, k: int) -> None:
        """Wait until ``side`` (``"actor"`` or ``"critic"``) step ``k`` is done."""
        with self._cv:
            done = self._cv.wait_for(
                lambda: getattr(self, f"{side}_k") >= k or self._error is not None, timeout=self.TIMEOUT_S
            )
            if self._error is not None:
                raise RlinfError(
                    f"SAC (pipelined): the actor-step thread failed: {self._error!r}"
                ) from self._error
            if not done:
                raise RlinfError(f"SAC (pipelined): {side} step {k} did not finish in {self.TIMEOUT_S:.0f} s")

    def _start(self) -> None:
        threads = torch.get_num_threads()  # OpenMP's thread count is per thread
        self._thread = threading.Thread(
            target=self._actor_loop, args=(threads,), name="sac-actor-step", daemon=True
        )
        self._thread.start()

    def _actor_loop(self, threads: int) -> None:
        torch.set_num_threads(threads)
        learner = self.learner
        while (job := self._jobs.get()) is not None:
            k, obs = job
            try:
                self._wait("critic", k - 2)
                out = learner._actor_step(
                    obs, learner.alpha, self.critics[self._slot(k - 2)], learner.side_generator
                )
                with self._cv, torch.no_grad():
                    torch._foreach_copy_(self._actor_slots[self._slot(k)], self._actor_params)
                    self.alphas[self._slot(k)] = learner.alpha.clone()
                    self._actor_out, self.actor_k = out, k
                    self._cv.notify_all()
            except BaseException as err:  # handed to the caller's thread, which raises it
                with self._cv:
                    self._error = err
                    self._cv.notify_all()
                return

    def update(self, t: tuple[Tensor, ...]) -> dict[str, Tensor]:
        """Critic step ``k`` (actor step ``k`` handed to the second thread); the caller then
        Polyak-updates and calls :meth:`critic_done`."""
        if self._thread is None:
            self._start()
        k = self.critic_k + 1
        self._jobs.put((k, t[0]))
        self._wait("actor", k - 2)
        i = self._slot(k - 2)
        out = self.learner._critic_step(t, self.alphas[i], self.actors[i])
        with self._cv:
            out.update(self._actor_out)  # the newest actor step's losses
        out["alpha"] = self.alphas[i]
        return out

    def critic_done(self, k: int) -> None:
        with self._cv, torch.no_grad():
            torch._foreach_copy_(self._critic_slots[self._slot(k)], self.learner._critic_params)
            self.critic_k = k
            self._cv.notify_all()

    def policy(self) -> SquashedGaussianActor:
        """A copy of the actor after actor step ``critic_k - 1``."""
        k = self.critic_k - 1
        self._wait("actor", k)
        with torch.no_grad():
            torch._foreach_copy_(list(self._policy.parameters()), self._actor_slots[self._slot(k)])
        return self._policy

    def drain(self) -> None:
        """Wait for the actor step of the last update (the live networks are then all current)."""
        self._wait("actor", self.critic_k)

    def state_dict(self) -> dict[str, Any]:
        """The snapshots the next update reads that the live networks no longer hold (those of
        the update before the last); call after :meth:`drain`."""
        i = self._slot(self.critic_k - 1)
        return {
            "actor": self.actors[i].state_dict(),
            "critic": self.critics[i].state_dict(),
            "alpha": self.alphas[i].clone(),
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restart the ring at the learner's loaded update count: its slot holds the live
        networks, the slot before it the saved snapshots (none: the live networks)."""
        self.close()
        learner = self.learner
        k = learner.updates
        with torch.no_grad():
            for j in range(self.RING):
                torch._foreach_copy_(self._actor_slots[j], self._actor_params)
                torch._foreach_copy_(self._critic_slots[j], learner._critic_params)
                self.alphas[j] = learner.alpha.clone()
            if state is not None and k > 0:
                i = self._slot(k - 1)
                self.actors[i].load_state_dict(state["actor"])
                self.critics[i].load_state_dict(state["critic"])
                self.alphas[i] = state["alpha"].clone()
        self.actor_k = self.critic_k = k

    def close(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(timeout=self.TIMEOUT_S)
            self._thread = None
