"""The GRPO components of the LLM path: agents (single and hierarchical) driven by a scripted
policy, the reward worker, advantages through the actor, and the actor's update."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from rlinf_algos.lm import hf
from rlinf_algos.lm.agents import HierarchicalAgent, SingleAgent
from rlinf_algos.lm.arith import Problem, chain_text, heldout_problems, lead_calls_text, step_width
from rlinf_algos.lm.config import ArithTaskConfig, LMGRPOConfig, LMModelConfig, ModelInitConfig
from rlinf_algos.lm.engines import HFEngine
from rlinf_algos.lm.hf import sequence_log_probs
from rlinf_algos.lm.learner import (
    LMLearner,
    ReferenceModel,
    pack_batch,
    sequence_advantages,
)
from rlinf_algos.lm.reward import Verifier
from rlinf_algos.lm.tasks import ArithTask
from rlinf_algos.lm.tokens import LMTokenizer

TOK = LMTokenizer.arith()
W = 3


class _Run:
    """What ArithTask reads of a run: the task section (and the model path for messages)."""

    def __init__(self, task: ArithTaskConfig) -> None:
        self.task = task
        self.model = LMModelConfig(path="(in memory)")
        self.algorithm = LMGRPOConfig(group_size=2)


def arith(**kw: object) -> ArithTask:
    return ArithTask(_Run(ArithTaskConfig(**kw)), TOK)


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> LMModelConfig:
    init = ModelInitConfig(hidden_size=16, num_layers=1, num_heads=2, max_position_embeddings=32)
    return LMModelConfig(path=str(hf.new_model_folder(tmp_path_factory.mktemp("m") / "m", init)))


def scripted_policy(wrong_subagent: bool = False, bad_lead: bool = False):
    """A generate function that answers like the reference solver (a test policy, not a model):
    lead turn 1 splits into calls, subagents and the lead's turn 2 write the chain."""

    def gen(prompts: list[list[int]], max_new: int, stop: Sequence[int]) -> list[list[int]]:
        out = []
        for p in prompts:
            text = TOK.decode(p).removeprefix("<bos>")
            if "<ret>" in text:  # the lead's turn 2: sum the inserted answers
                terms = [int(x) for x in text.split("<ret>")[1].rstrip("=").split("+")]
                resp = chain_text(terms, W)
            elif text.startswith("("):  # the lead's turn 1: one call per group
                groups = tuple(
                    tuple(int(x) for x in g.strip("()").split("+")) for g in text.rstrip("=").split(")+(")
                )
                resp = "<call>12<ret>" if bad_lead else lead_calls_text(Problem(groups))
            else:  # a subagent
                terms = [int(x) for x in text.rstrip("=").split("+")]
                resp = chain_text(terms, W)
                if wrong_subagent:
                    resp = resp.replace("<eos>", "")
            out.append(TOK.encode(resp)[:max_new])
        return out

    return gen


PROBLEMS = [Problem(((12, 34, 56), (78, 90, 11))), Problem(((1, 2), (3, 4), (5, 6)))]


def test_hierarchical_agent_trace_and_isolated_contexts() -> None:
    seen: list[str] = []
    policy = scripted_policy()

    def gen(prompts: list[list[int]], n: int, stop: Sequence[int]) -> list[list[int]]:
        seen.extend(TOK.decode(p) for p in prompts)
        return policy(prompts, n, stop)

    eps = HierarchicalAgent(arith(mode="multiagent"), TOK, 64, max_calls=8, max_context=256).run(
        PROBLEMS, 2, gen
    )
    assert eps.num_episodes == 4 and eps.failures == [""] * 4
    # subagents see only their own sub-task
    assert "<bos>12+34+56=" in seen and "<bos>5+6=" in seen
    assert not any(s.startswith("<bos>12+34+56=") and "78" in s for s in seen)
    # episode 0: the lead's sequence then its two subagents', all with episode index 0
    kinds = [(e, k) for e, k in zip(eps.episode_index, eps.agent_kind, strict=True) if e == 0]
    assert kinds == [(0, "lead"), (0, "sub"), (0, "sub")]
    lead = TOK.decode(eps.sequences[0])
    assert lead == (
        "<bos>(12+34+56)+(78+90+11)=<call>12+34+56<call>78+90+11<ret>102+179=" + chain_text([102, 179], W)
    )
    # the orchestrator's insertion and the prompt are not trained on
    trained = TOK.decode([t for t, m in zip(eps.sequences[0], eps.loss_masks[0], strict=True) if m])
    assert trained == "<call>12+34+56<call>78+90+11<ret>" + chain_text([102, 179], W)
    r = Verifier(arith(mode="multiagent")).compute(
        {"response_ids": eps.final_responses, "answers": eps.answers}
    )
    assert r["rewards"].tolist() == [1.0] * 4


@pytest.mark.parametrize(
    ("kw", "why"), [({"bad_lead": True}, "lead turn 1"), ({"wrong_subagent": True}, "subagent")]
)
def test_hierarchical_agent_failures_end_the_episode_with_zero_reward(kw: dict, why: str) -> None:
    eps = HierarchicalAgent(arith(mode="multiagent"), TOK, 64, max_calls=8, max_context=256).run(
        PROBLEMS[:1], 2, scripted_policy(**kw)
    )
    assert all(why in f for f in eps.failures)
    assert eps.final_responses == [[], []]
    r = Verifier(arith(mode="multiagent")).compute(
        {"response_ids": eps.final_responses, "answers": eps.answers}
    )
    assert r["rewards"].tolist() == [0.0, 0.0]
    # the trace still holds what was generated, for the (negative or zero) advantage
    assert set(eps.episode_index) == {0, 1}


def test_single_agent_on_grouped_prompt() -> None:
    eps = SingleAgent(arith(), TOK, 64).run(
        PROBLEMS[:1], 3, lambda p, n, s: [TOK.encode("<step>1+1=2<ans>2<eos>")] * len(p)
    )
    assert eps.episode_index == [0, 1, 2] and eps.answers == [281] * 3
    assert sum(eps.loss_masks[0]) == len(TOK.encode("<step>1+1=2<ans>2<eos>"))


def test_reward_worker_scores_and_checks_lengths() -> None:
    rw = Verifier(arith(format_reward=0.1))
    ids = [
        TOK.encode("<step>1+1=2<ans>2<eos>"),
        TOK.encode("<step>1+1=2<ans>3<eos>"),
        TOK.encode("<ans>2"),
        [],
    ]
    r = rw.compute({"response_ids": [torch.tensor(ids[0]), *ids[1:]], "answers": [2, 2, 2, 2]})
    assert r["rewards"].tolist() == pytest.approx([1.0, 0.1, 0.0, 0.0])
    assert r["well_formed"].tolist() == [True, True, False, False]
    with pytest.raises(ValueError, match="2 responses but 1 answers"):
        rw.compute({"response_ids": ids[:2], "answers": [2]})


def test_group_advantages_hand_computed_through_the_actor(spec: LMModelConfig) -> None:
    # two groups of G=4: rewards [1,0,0,1] -> mean .5, unbiased std 1/sqrt(3) -> +-0.866;
    # [1,1,1,1] -> all zero (and marked uniform)
    cfg = LMGRPOConfig(group_size=4)
    actor = LMLearner(hf.load_causal_lm(spec), cfg)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    # episode 0 has a lead and two subagents; every sequence gets its episode's advantage
    episode_index = torch.tensor([0, 0, 0, 1, 2, 3, 4, 5, 6, 7])
    adv, uniform = actor.advantages({"rewards": rewards, "episode_index": episode_index})
    a = 0.5 / (1 / 3**0.5 + 1e-6)
    expect = torch.tensor([a, a, a, -a, -a, a, 0, 0, 0, 0])
    assert torch.allclose(adv, expect, atol=1e-5)
    assert uniform.tolist() == [False] * 6 + [True] * 4
    adv2, _ = sequence_advantages(rewards, episode_index, 4, scale=False)
    assert torch.allclose(adv2, torch.tensor([0.5, 0.5, 0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]))


def test_actor_update_moves_towards_rewarded_responses(spec: LMModelConfig) -> None:
    torch.manual_seed(0)
    cfg = LMGRPOConfig(group_size=2, lr=1e-2, minibatch_size=4, update_epochs=4, kl_coef=0.1)
    model = hf.load_causal_lm(spec)
    actor = LMLearner(model, cfg)
    ref = ReferenceModel(spec, actor.get_weights()[0])
    good, bad = TOK.encode("<bos>1+1=<step>1+1=2<ans>2<eos>"), TOK.encode("<bos>1+1=<step>1+1=3<ans>3<eos>")
    p = len(TOK.encode("<bos>1+1="))
    mask = [[0] * p + [1] * (len(good) - p)] * 2
    batch = pack_batch([good, bad], mask, TOK.pad_id)
    batch["episode_index"] = torch.tensor([0, 1])
    batch["rewards"] = torch.tensor([1.0, 0.0])
    batch.update(ref.compute_log_probs(batch))
    before = actor.compute_log_probs(batch)["log_probs"]
    stats = actor.update(batch)
    after = actor.compute_log_probs(batch)["log_probs"]
    m = batch["loss_mask"]
    assert float((after * m)[0].sum()) > float((before * m)[0].sum())  # the rewarded answer is likelier
    assert float((after * m)[1].sum()) < float((before * m)[1].sum())
    assert stats["trained_sequences"] == 2 and stats["kl"] >= 0.0 and actor.version == 1
    # the rollout worker receives the new weights through get/set_weights
    rollout = HFEngine(spec)
    rollout.set_weights(*actor.get_weights())
    with torch.no_grad():
        assert torch.allclose(sequence_log_probs(rollout.model, batch["input_ids"]), after, atol=1e-6)
    assert rollout.version == 1
    # a batch whose groups all tie trains on nothing
    batch["rewards"] = torch.tensor([1.0, 1.0])
    assert actor.update(batch)["trained_sequences"] == 0


def test_rollout_generate_batch_dict_form(spec: LMModelConfig) -> None:
    rollout = HFEngine(spec)
    out = rollout.generate_batch(
        {"prompts": [[1, 8], [1]], "max_new_tokens": 5, "stop_ids": [], "temperature": 0.0}
    )
    assert [len(r) for r in out["responses"]] == [5, 5] and out["version"] == -1
    assert rollout.tokens == 10


def test_sft_reference_solutions_are_what_the_tests_assume() -> None:
    cfg = ArithTaskConfig(mode="multiagent", num_groups=2, num_terms=[3], max_digits=2)
    assert step_width(cfg) == 3
    assert len(heldout_problems(cfg)) == cfg.eval_size


def test_single_step_update_skips_the_old_log_prob_forward_exactly(spec: LMModelConfig) -> None:
    """One epoch, one minibatch: the training forward's detached log-probs stand in for the
    sampling policy's (the weights are still its), and the update is the one a separate no-grad
    forward would give."""
    from rlinf_algos.lm.learner import log_probs_chunked

    cfg = LMGRPOConfig(group_size=2, lr=1e-2, minibatch_size=8, kl_coef=0.0, lr_warmup_iters=0)
    good, bad = TOK.encode("<bos>1+1=<step>1+1=2<ans>2<eos>"), TOK.encode("<bos>1+1=<step>1+1=3<ans>3<eos>")
    batch = pack_batch([good, bad], [[0] * 5 + [1] * (len(good) - 5)] * 2, TOK.pad_id)
    batch["episode_index"] = torch.tensor([0, 1])
    batch["rewards"] = torch.tensor([1.0, 0.0])
    torch.manual_seed(0)
    fast = LMLearner(hf.load_causal_lm(spec), cfg)
    torch.manual_seed(0)
    slow = LMLearner(hf.load_causal_lm(spec), cfg)
    assert fast.old_log_probs(batch["input_ids"]) is None
    slow.old_log_probs = lambda ids, mask=None: log_probs_chunked(slow.model, ids, cfg.temperature, 8)  # type: ignore[method-assign]
    a, b = fast.update(dict(batch)), slow.update(dict(batch))
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
    for p, q in zip(fast.model.parameters(), slow.model.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)
    assert (
        LMLearner(fast.model, cfg.model_copy(update={"update_epochs": 2})).old_log_probs(batch["input_ids"])
        is not None
    )
