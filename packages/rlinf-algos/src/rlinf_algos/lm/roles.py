"""The bodies a language-model flow gives the generic role workers (:mod:`rlinf_algos.runtime.workers`).

One iteration on placed workers (the driver starts every call at once; the data moves between
workers over the run's channels)::

    driver --problems--> agent ranks (or the driver itself when no `agent` is placed)
    agent  --gen "req"--> rollout ranks --gen "<agent key>"--> agent          (any idle rollout rank
                                                                              takes the next request)
    agent  --scored "<part>"--> actor                 the whole episodes, once (training)
    agent  --episodes "<part>"--> reward rank         the final responses and answers alone
    agent  --refq "<part>"--> reference               the sequences (training, kl_coef > 0)
    reward --scored "<part>/score"--> actor           the rewards
    reference --refq "<it>/ref/lp"--> actor           the reference log-probs of the packed batch
    actor: the update --weights (version it+1)--> rollout ranks, before their next request

(``<part>``: ``<it>/a<agent rank>``, scored by reward rank ``agent rank mod #reward``.) The
episodes take one hop to the actor; the reward ranks score and the reference computes its
log-probabilities while the actor gathers and packs them (:func:`hand_on`), so neither waits
for the other: before, the episodes went agent -> reward -> actor and the actor asked the
reference only once it had packed every scored part.

- :class:`LMRollout`: the run's rollout engine, answering generation requests (``serve``);
- :class:`LMScorer`: the verifier (or the user's reward) over an iteration's episodes;
- :class:`LMReference`: the frozen warm start's log-probabilities;
- :class:`LMActor`: the learner (:mod:`rlinf_algos.lm.learner`) on the scored episodes;
- :class:`AgentPlayer`: the task's episodes (single, lead and subagents, tool-calling) against
  the rollouts, their tools on the ``tool`` ranks when placed (:func:`placed_tools`);
- :func:`tool_server`: the ``tool`` ranks' body (:class:`~rlinf_algos.tools.placed.ToolServer`).

The reward and agent bodies import no torch: they are light processes. This module imports no
torch at import time.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from rlinf_algos.channels import Aborted, is_abort
from rlinf_algos.lm.agents import make_agent
from rlinf_algos.lm.folder import context_length
from rlinf_algos.lm.remote_generate import ChannelGenerate, play
from rlinf_algos.lm.tasks import make_task, task_tokenizer
from rlinf_core.errors import RlinfError

__all__ = [
    "STOP",
    "AgentPlayer",
    "LMActor",
    "LMReference",
    "LMRollout",
    "LMScorer",
    "hand_on",
    "placed_tools",
    "tool_server",
    "with_behaviour",
]

STOP = "__rlinf_lm_stop__"
"""Put on the ``gen`` channel's ``req`` key once per rollout rank to end its serve loop."""


def hand_on(
    eps: dict[str, Any], key: str, channels: dict[str, Any], timeout: float, train: bool, reference: bool
) -> None:
    """Hand the episodes of the part ``key`` on from where they were played: what the verifier
    reads (``final_responses``, ``answers``) to the reward rank (``episodes``); in training, the
    whole episodes to the actor (``scored``) and their sequences to the reference (``refq``,
    when ``reference``). The longest work starts first: the reference's forward, the scoring,
    then the actor's packing."""
    if train and reference:
        channels["refq"].put({"sequences": eps["sequences"]}, key, timeout=timeout)
    light = {"final_responses": eps["final_responses"], "answers": eps["answers"]}
    channels["episodes"].put(light, key, timeout=timeout)
    if train:
        channels["scored"].put(eps, key, timeout=timeout)


def with_behaviour(
    eps: dict[str, Any], table: dict[tuple[tuple[int, ...], tuple[int, ...]], Any]
) -> dict[str, Any]:
    """``eps`` (an :class:`~rlinf_algos.lm.agents.EpisodeBatch` as a dict) with what an
    asynchronous run's learner needs of each sequence: ``versions`` (the oldest weight version
    that generated one of its trained spans) and ``behaviour_log_probs`` (the rollout's log-probs
    of its trained tokens at generation time, 0 elsewhere). ``table``: what the rollout ranks
    answered, ``{(context, response): (version, log-probs)}``
    (:attr:`~rlinf_algos.lm.remote_generate.ChannelGenerate.behaviour`); each trained span of a
    sequence (a run of 1s of its loss mask) is looked up with the tokens before it as its
    context. A sequence with a span not found (an agent that edited a response before training
    on it) gets version ``-1``: the learner leaves it out and counts it as stale."""
    versions: list[int] = []
    rows: list[list[float]] = []
    for seq, mask in zip(eps["sequences"], eps["loss_masks"], strict=True):
        row = [0.0] * len(seq)
        version: int | None = None
        i, n = 0, len(mask)
        while i < n:
            if not mask[i]:
                i += 1
                continue
            j = i
            while j < n and mask[j]:
                j += 1
            hit = table.get((tuple(seq[:i]), tuple(seq[i:j])))
            if hit is None:
                version = -1
                break
            row[i:j] = hit[1]
            version = int(hit[0]) if version is None else min(version, int(hit[0]))
            i = j
        versions.append(-1 if version is None else version)
        rows.append(row)
    return {**eps, "versions": versions, "behaviour_log_probs": rows}


def padded_ids(sequences: list[list[int]], pad_id: int) -> Any:
    """``[N, T]`` token ids, right-padded with ``pad_id`` (the ``input_ids`` the actor's
    :func:`~rlinf_algos.lm.learner.pack_batch` makes of the same sequences)."""
    import torch

    t = max(len(x) for x in sequences)
    ids = torch.full((len(sequences), t), pad_id, dtype=torch.long, device="cpu")  # host batch
    for i, x in enumerate(sequences):
        ids[i, : len(x)] = torch.as_tensor(list(x), dtype=torch.long, device="cpu")
    return ids


class LMRollout:
    """Serves generation requests from the host's ``gen`` channel with the newest policy of the
    broadcast (at least a request's ``min_version``)."""

    def __init__(self, host: Any, run: Any) -> None:
        from rlinf_algos.lm.engines import make_rollout

        self.host, self.run = host, run
        tok = task_tokenizer(run)
        self.pad_id = tok.pad_id
        self.engine = make_rollout(run, seed=run.runner.seed + 7919 * (host.rank + 1), pad_id=tok.pad_id)

    @property
    def version(self) -> int:
        return int(self.engine.version)

    def configure(self, spec: Any) -> None:
        """Nothing to build: the engine loaded the run's model folder at start."""

    def set_weights(self, state_dict: dict[str, Any], version: int) -> None:
        self.engine.set_weights(state_dict, version)

    def weights(self) -> dict[str, Any]:
        return dict(self.engine.model.state_dict())

    def rng_state(self) -> dict[str, Any]:
        gen = getattr(self.engine, "generator", None)
        return {"engine": gen.get_state()} if gen is not None else {}

    def set_rng_state(self, state: dict[str, Any]) -> None:
        gen = getattr(self.engine, "generator", None)
        if gen is not None and "engine" in state:
            gen.set_state(state["engine"])

    def sample_with_log_probs(
        self, prompts: list[list[int]], max_new_tokens: int, stop_ids: list[int], temperature: float | None
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Responses and their behaviour log-probs (pad ids left out, as the agents trim the
        responses): from the engine while it samples when it offers that
        (``generate_with_log_probs``, as the ``hf`` engine does: no second forward), else by a
        forward over the responses (:meth:`behaviour_log_probs`)."""
        both = getattr(self.engine, "generate_with_log_probs", None)
        if both is None:
            responses = self.engine.generate(prompts, max_new_tokens, stop_ids, temperature)
            return responses, self.behaviour_log_probs(prompts, responses, temperature)
        responses, lps = both(prompts, max_new_tokens, stop_ids, temperature)
        pad = self.pad_id
        trimmed = [
            [x for t, x in zip(r, lp, strict=True) if t != pad] for r, lp in zip(responses, lps, strict=True)
        ]
        return responses, trimmed

    def behaviour_log_probs(
        self, prompts: list[list[int]], responses: list[list[int]], temperature: float | None
    ) -> list[list[float]]:
        """The log-probs of each response's tokens (pad ids left out, as the agents trim them)
        under the weights that just generated them, at the sampling temperature, as the learner
        computes its own (:func:`~rlinf_algos.lm.learner.log_probs_chunked`): an asynchronous
        run's behaviour policy."""
        from contextlib import nullcontext

        from rlinf_algos.lm.learner import log_probs_chunked, pack_batch
        from rlinf_algos.models import lora

        model = getattr(self.engine, "model", None)
        if model is None:
            raise RlinfError(
                f"rollout engine {self.run.rollout.engine!r} gives no model to take the behaviour log-probs "
                "of an asynchronous run with (rollout.max_staleness > 0): use the hf engine or 0"
            )
        trimmed = [[t for t in r if t != self.pad_id] for r in responses]
        seqs = [list(p) + r for p, r in zip(prompts, trimmed, strict=True)]
        masks = [[0] * len(p) + [1] * len(r) for p, r in zip(prompts, trimmed, strict=True)]
        if not any(trimmed):
            return [[] for _ in trimmed]
        batch = pack_batch(seqs, masks, self.pad_id)
        dev = next(model.parameters()).device
        temp = float(self.engine.temperature if temperature is None else temperature)
        merged = getattr(self.engine, "base_weights", None) is not None
        with lora.bare_lora_layers(model) if merged else nullcontext():
            lp = log_probs_chunked(
                model, batch["input_ids"].to(dev), temp, 64, batch["loss_mask"].to(dev)
            ).cpu()
        return [
            lp[i, len(p) : len(p) + len(r)].tolist()
            for i, (p, r) in enumerate(zip(prompts, trimmed, strict=True))
        ]

    def serve(self) -> dict[str, Any]:
        """Answer requests until a :data:`STOP`; returns the requests served, the tokens
        generated and the seconds spent generating (not waiting)."""
        from rlinf_core.errors import ChannelTimeout, PeerLost

        host = self.host
        gen, timeout = host.channel("gen"), host.timeout
        served = 0
        busy = 0.0
        idle_since = time.monotonic()
        while True:
            try:
                req = gen.get("req", timeout=max(0.01, timeout - (time.monotonic() - idle_since)))
            except ChannelTimeout as err:
                raise RlinfError(
                    f"rollout rank {host.rank}: no generation request for {timeout:g} s "
                    "(runner.worker_timeout); is the driver alive?"
                ) from err
            except PeerLost:  # a requester (an agent) died: the driver restarts it, not this rank
                if time.monotonic() - idle_since > timeout:
                    raise
                time.sleep(0.2)  # until its successor connects (the channel forgets the dead one)
                continue
            idle_since = time.monotonic()
            if isinstance(req, str) and req == STOP:
                break
            t0 = time.perf_counter()
            if req.get("report"):
                gen.put({"rank": host.rank, "pid": os.getpid()}, req["report"], timeout=timeout)
            host.sync(int(req["min_version"]))
            tokens0 = self.engine.tokens
            args = (req["prompts"], req["max_new_tokens"], req["stop_ids"], req.get("temperature"))
            log_probs = None
            if req.get("behaviour"):  # an asynchronous run: the behaviour policy's log-probs
                responses, log_probs = self.sample_with_log_probs(*args)
            else:
                responses = self.engine.generate(*args)
            reply = {
                "part": req["part"],
                "responses": responses,
                "version": self.engine.version,
                "tokens": self.engine.tokens - tokens0,
            }
            if log_probs is not None:
                reply["log_probs"] = log_probs
                reply["pad_id"] = self.pad_id
            gen.put(reply, req["reply"], timeout=timeout)
            served += 1
            busy += time.perf_counter() - t0
        return {"requests": served, "tokens": self.engine.tokens, "busy_s": busy}


class LMScorer:
    """The verifier on a CPU-only process (no torch): scores the final responses of given keys
    of the ``episodes`` channel and sends the rewards to the actor (``scored``)."""

    def __init__(self, host: Any, run: Any) -> None:
        from rlinf_algos.lm.reward import Verifier

        self.host = host
        log_dir = host.options.get("log_dir")
        log = Path(log_dir) / f"reward-r{host.rank}.log" if log_dir else None
        self.verifier = Verifier(make_task(run, task_tokenizer(run), reward_log=log))

    def score(self, keys: list[str], send: bool, report: str | None = None) -> dict[str, Any]:
        """Score the final responses at each of ``keys`` (in order); when ``send`` (training, not
        an evaluation) put their ``rewards``, ``correct`` and ``well_formed`` on the ``scored``
        channel at ``<key>/score``. Returns per key ``correct`` and ``well_formed`` lists, and
        ``busy_s`` (``aborted`` when the driver ended the iteration). ``report``: a key to put
        this rank and pid on once it has its first episodes."""
        host = self.host
        episodes, scored, timeout = host.channel("episodes"), host.channel("scored"), host.timeout
        out: dict[str, Any] = {"parts": {}, "busy_s": 0.0}
        for key in keys:
            eps = episodes.get(key, timeout=timeout)
            if is_abort(eps):
                return {"aborted": True, "parts": {}, "busy_s": out["busy_s"]}
            if report is not None:
                episodes.put({"rank": host.rank, "pid": os.getpid()}, report, timeout=timeout)
                report = None
            t0 = time.perf_counter()
            r = self.verifier.compute({"response_ids": eps["final_responses"], "answers": eps["answers"]})
            part = {
                "rewards": [float(x) for x in r["rewards"]],
                "correct": [bool(x) for x in r["correct"]],
                "well_formed": [bool(x) for x in r["well_formed"]],
            }
            out["parts"][key] = part
            out["busy_s"] += time.perf_counter() - t0
            out["failures"] = int(r.get("failures", 0))
            if send:
                scored.put(part, key + "/score", timeout=timeout)
        return out


class LMReference:
    """The frozen reference: the warm-started policy (version 0 of the broadcast; with LoRA, the
    base model with the adapter disabled); answers the actor's log-prob requests on ``refq``."""

    def __init__(self, host: Any, run: Any) -> None:
        self.host, self.run = host, run
        self.model: Any = None

    def freeze(self, spec: Any, state_dict: dict[str, Any] | None) -> None:
        """Freeze ``state_dict`` (version 0 as the weight sync carries it), or with ``None`` (a
        restarted reference) the model folder the actor loaded version 0 from (``model.path``:
        the warm-started policy, or the run's base model)."""
        from rlinf_algos.devices import role_device
        from rlinf_algos.lm.learner import ReferenceModel

        self.model = ReferenceModel(
            self.run.model,
            None if state_dict is None else {k: v.clone() for k, v in state_dict.items()},
            temperature=self.run.algorithm.temperature,
            device=role_device(str(self.run.runner.device)),  # the GPU its placement gives, if any
        )

    def log_probs(self, keys: list[str], key: str) -> dict[str, Any]:
        """Take the sequences of the parts at ``keys`` (in the actor's order, as they are
        played), pad them as the actor packs them and put their ``ref_log_probs`` at
        ``key + "/lp"``."""
        if self.model is None:
            raise RlinfError("reference worker: configure() the frozen weights before log_probs()")
        refq, timeout = self.host.channel("refq"), self.host.timeout
        seqs: list[list[int]] = []
        for k in keys:
            part = refq.get(k, timeout=timeout)
            if is_abort(part):
                return {"aborted": True, "busy_s": 0.0}
            seqs += part["sequences"]
        t0 = time.perf_counter()
        out = self.model.compute_log_probs({"input_ids": padded_ids(seqs, task_tokenizer(self.run).pad_id)})
        refq.put(out, key + "/lp", timeout=timeout)
        return {"busy_s": time.perf_counter() - t0}


class LMActor:
    """The learner on the actor worker: holds the policy and its optimiser and runs the update on
    the scored episodes of the ``scored`` channel (the host publishes the weights).

    Placed on several processes, the actor is one data-parallel learner group
    (:mod:`rlinf_algos.parallel`, the ``actor`` section): rank 0 takes the scored parts and the
    reference log-probs and hands the packed batch to the other ranks; each rank trains on its
    share of every minibatch; rank 0 publishes."""

    def __init__(self, host: Any, run: Any) -> None:
        self.host, self.run = host, run
        self.learner: Any = None
        self.tok: Any = None

    def build(self, spec: Any, state: dict[str, Any] | None, init: Any) -> None:
        """Load the policy (the warm-started folder when the run had a warm start: the driver ran
        it before launching the workers) on every rank, or under FSDP on rank 0 alone, the
        others building it on the meta device and receiving their shards
        (:meth:`~rlinf_algos.parallel.DataParallel.wrap_loaded`); with ``state``, continue from it."""
        from rlinf_algos.lm.learner import make_learner
        from rlinf_algos.lm.trainer import policy_to_train

        def load(meta: bool) -> Any:
            model, self.tok = policy_to_train(self.run, meta=meta)
            return model

        model = self.host.dp.wrap_loaded(lambda: load(False), lambda: load(True))
        self.learner = make_learner(model, self.run, dp=self.host.dp)
        if state is not None:
            self.learner.load_state_dict(state)

    @property
    def version(self) -> int:
        return int(self.learner.version)

    def weights(self) -> dict[str, Any]:
        return self.learner.get_weights()[0]

    def _pack(self, keys: list[str], ref_key: str | None) -> tuple[dict[str, Any], int, float, dict] | None:
        import torch

        from rlinf_algos.lm.learner import pack_batch

        scored, refq, timeout = self.host.channel("scored"), self.host.channel("refq"), self.host.timeout
        parts = []
        for k in keys:  # the whole episodes, straight from where they were played
            parts.append(scored.get(k, timeout=timeout))
            if is_abort(parts[-1]):
                return None
        outcomes: dict[str, Any] = {"correct": [], "well_formed": [], "generated_tokens": 0}
        seqs = [x for p in parts for x in p["sequences"]]
        batch = pack_batch(seqs, [x for p in parts for x in p["loss_masks"]], self.tok.pad_id)
        for k, p in zip(keys, parts, strict=True):  # their rewards, from the reward ranks
            score = scored.get(k + "/score", timeout=timeout)
            if is_abort(score):
                return None
            p.update(score)
        index: list[int] = []
        rewards: list[float] = []
        for p in parts:
            off = len(rewards)
            index += [off + e for e in p["episode_index"]]
            rewards += [float(x) for x in p["rewards"]]
            outcomes["correct"] += list(p.get("correct", []))
            outcomes["well_formed"] += list(p.get("well_formed", []))
            outcomes["generated_tokens"] += int(p.get("generated_tokens", 0))
        outcomes["rewards"] = rewards
        if all("versions" in p for p in parts):  # an asynchronous run's (with_behaviour)
            batch["versions"] = torch.tensor(
                [v for p in parts for v in p["versions"]], dtype=torch.long, device="cpu"
            )
            behav = torch.zeros(batch["input_ids"].shape, dtype=torch.float32, device="cpu")  # host batch
            for i, row in enumerate(x for p in parts for x in p["behaviour_log_probs"]):
                behav[i, : len(row)] = torch.as_tensor(row, dtype=torch.float32, device="cpu")
            batch["behaviour_log_probs"] = behav
        batch["episode_index"] = torch.tensor(index, dtype=torch.long, device="cpu")  # host batch
        batch["rewards"] = torch.tensor(rewards, dtype=torch.float32, device="cpu")
        ref_s = 0.0
        if ref_key is not None:  # computed meanwhile, from the sequences as they were played
            t = time.perf_counter()
            lp = refq.get(ref_key + "/lp", timeout=timeout)
            if is_abort(lp):
                return None
            batch.update(lp)
            ref_s = time.perf_counter() - t
        return batch, len(seqs), ref_s, outcomes

    def train(self, gen: str, keys: list[str], ref_key: str | None = None) -> dict[str, Any]:
        """Gather the episodes at ``keys`` (whole groups each, in order) and pack them, then
        their rewards (``<key>/score``) and the reference log-probs the reference put at
        ``<ref_key>/lp`` (when not ``None``), and run the update.
        Returns the update stats, ``version``, the parts' ``outcomes`` and seconds; ``aborted``
        when the driver ended the iteration (no update). Rank 0 packs; the other ranks get the
        batch from it."""
        dp = self.host.dp
        t0 = time.perf_counter()
        dp.arrive(f"the batch at {keys[0] if keys else '-'}")
        packed = dp.from_main(lambda: self._pack(keys, ref_key))
        if packed is None:
            return {"aborted": True}
        batch, sequences, ref_s, outcomes = packed
        t = time.perf_counter()
        stats = self.learner.update(batch)
        update_s = time.perf_counter() - t
        return {
            "stats": stats,
            "version": self.learner.version,
            "sequences": sequences,
            "reference_wait_s": ref_s,
            "update_s": update_s,
            "allreduce_s": dp.take_comm_s(),
            "learner_world_size": dp.world,
            "publish_bytes": self.learner.publish_bytes,
            "pack_s": time.perf_counter() - t0 - ref_s - update_s,
            "outcomes": outcomes,
        }

    def state(self) -> dict[str, Any]:
        """The learner's checkpoint state (:meth:`~rlinf_algos.lm.learner.LMLearner.state_dict`);
        on a learner group every rank calls, rank 0's is complete."""
        return self.learner.state_dict()

    def load(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)

    def policy(self) -> dict[str, Any]:
        """The final policy from the learner's own state: the files of its model folder
        (``policy``, merged with LoRA; ``adapter``, the peft folder, with LoRA) as
        :func:`~rlinf_algos.lm.hf.save_model_folder` writes them, which the driver writes into
        the run directory, with no model of its own. On an FSDP learner group the weights are
        sharded: every rank gathers and rank 0 returns them as a publish carries them
        (``state_dict``), and the driver builds the folder from those."""
        import tempfile

        from rlinf_algos.lm import hf

        if self.host.dp.sharded:
            return {"state_dict": self.learner.get_weights()[0]}
        if not self.host.dp.is_main:
            return {}
        with tempfile.TemporaryDirectory(prefix="rlinf-policy-") as tmp:
            root = Path(tmp)
            tokenizer = Path(self.run.model.path or "")
            hf.save_model_folder(self.learner.model, tokenizer, root / "policy", root / "adapter")
            return {n: hf.folder_files(root / n) for n in ("policy", "adapter") if (root / n).is_dir()}

    def parameters(self) -> dict[str, int]:
        from rlinf_algos.lm import hf

        trainable, total = hf.parameter_counts(self.learner.model)
        return {"trainable": trainable, "total": total}


def tool_server(host: Any, run: Any) -> Any:
    """The ``tool`` component's body: the run's ``tools`` section loaded once in this process."""
    from rlinf_algos.tools.placed import ToolServer

    if run.tools is None:
        raise RlinfError("a `tool` component is placed but the run has no `tools` section")
    return ToolServer(host, run.tools.entries)


def placed_tools(host: Any, reply: str, report: str | None = None) -> Any:
    """A client of the ``tool`` ranks under the reply key ``reply`` when the host was given the
    run's ``tools`` channel (a ``tool`` component is placed), else ``None`` (the agent runs its
    tools itself)."""
    ch = host.channels.get("tools")
    if ch is None:
        return None
    from rlinf_algos.tools.placed import PlacedTools

    return PlacedTools(ch, reply, host.timeout, report=report)


class AgentPlayer:
    """The agent body (no model, no torch): plays single, hierarchical or tool-calling episodes
    by asking the rollout ranks for generations over the ``gen`` channel, and puts what the
    verifier reads on the ``episodes`` channel for the reward component. The episode is the task's
    (:func:`~rlinf_algos.lm.agents.make_agent`); a tool-calling episode's calls go to the
    ``tool`` ranks when a ``tool`` component is placed (the host has a ``tools`` channel), else
    run in this process. In training the whole episodes go to the actor and their sequences to
    the reference as well (:func:`hand_on`)."""

    def __init__(self, host: Any, run: Any) -> None:
        self.host = host
        tok = task_tokenizer(run)
        task = make_task(run, tok)
        self.agent = make_agent(
            task, tok, task.max_new_tokens(), run.task.max_calls, context_length(run.model)
        )
        if task.mode == "tools":
            task.chat  # noqa: B018 - the tools' schemas and the chat format, built at start

    def play(
        self,
        key: str,
        problems: list[Any],
        group_size: int,
        temperature: float | None,
        min_version: int,
        report: str | None = None,
        tool_report: str | None = None,
        train: bool = False,
        reference: bool = False,
        behaviour: bool = False,
    ) -> dict[str, Any]:
        """Play ``group_size`` episodes of each of ``problems``; hand them on under ``key``;
        return counts and seconds (``aborted`` when the driver ended it). ``behaviour``: an
        asynchronous run's training pass (the episodes carry their versions and behaviour
        log-probs, :func:`with_behaviour`).
        ``report`` / ``tool_report``: keys the first rollout / tool rank that takes a request
        reports on (fault tests). ``train``: a training pass (the episodes go to the actor as
        well, and with ``reference`` their sequences to the reference: :func:`hand_on`)."""
        host = self.host
        gen = ChannelGenerate(
            host.channel("gen"), int(host.options.get("n_rollout", 1)), f"agent{host.rank}/{key}",
            temperature, min_version, host.timeout, report=report, behaviour=behaviour,
        )  # fmt: skip
        tools = placed_tools(host, f"agent{host.rank}/{key}/tools", tool_report)
        try:
            eps, stats = play(self.agent, problems, group_size, gen, tools)
        except Aborted:
            return {"aborted": True}
        out = eps.to_dict()
        if gen.behaviour is not None:
            out = with_behaviour(out, gen.behaviour)
        hand_on(out, key, host.channels, host.timeout, train, reference)
        return stats
