"""The language-model domain: GRPO (``grpo_lm``) and PPO (``ppo_lm``) on any Hugging Face causal-LM
folder, on a data set with a reward you bring or on the arithmetic task with its exact verifier
(single-agent, or WideSeek-R1-style lead and subagents), and ``rlinf sft``.

Modules (those marked *light* import neither torch nor transformers, so agent and reward
processes stay small):

- :mod:`~rlinf_algos.lm.config`: the run YAML's sections (*light*);
- :mod:`~rlinf_algos.lm.data`, :mod:`~rlinf_algos.lm.rewards`: data sets (JSONL, parquet, chat
  templates) and reward functions;
- :mod:`~rlinf_algos.lm.arith`, :mod:`~rlinf_algos.lm.tasks`: the arithmetic family and its
  verifier; what a run trains on (*light*);
- :mod:`~rlinf_algos.lm.tokens`: tokenizers of model folders (*light*);
- :mod:`~rlinf_algos.lm.agents`: single and hierarchical (lead + subagents) episodes (*light*);
- :mod:`~rlinf_algos.lm.folder`, :mod:`~rlinf_algos.lm.hf`, :mod:`~rlinf_algos.lm.kvcache`,
  :mod:`~rlinf_algos.lm.prefix`: model folders; load, LoRA, sample, score, sync, save;
- :mod:`~rlinf_algos.lm.reward` (the verifier), :mod:`~rlinf_algos.lm.learner` (the learner and
  the frozen reference model), :mod:`~rlinf_algos.lm.engines` (the rollout engines: ``hf``);
- :mod:`~rlinf_algos.lm.ppo`: the critic and token-level GAE of ``ppo_lm``;
- :mod:`~rlinf_algos.lm.finetune`: ``rlinf sft``; :mod:`~rlinf_algos.lm.sft`: the arithmetic
  examples' warm start, an ``rlinf sft`` run on a teacher's solutions;
- :mod:`~rlinf_algos.lm.trainer`: the model folder a run trains (warm start) and evaluation;
- :mod:`~rlinf_algos.lm.flow` (the flow the one driver runs, ``train_lm``), :mod:`~rlinf_algos.lm.run`
  (its iterations and run counters), :mod:`~rlinf_algos.lm.placed` (the components on the scheduler's
  workers, in one process for ``runner.scheduler: local``), :mod:`~rlinf_algos.lm.roles`
  (the role bodies in the worker processes), :mod:`~rlinf_algos.lm.remote_generate` (generation
  over the ``gen`` channel, *light*);
- :mod:`~rlinf_algos.lm.algorithm`: the ``grpo_lm`` / ``ppo_lm`` algorithm classes for ``rlinf train``.

Run an example in this process: ``python -m rlinf_algos.lm examples/grpo_arith.yaml``.
"""
