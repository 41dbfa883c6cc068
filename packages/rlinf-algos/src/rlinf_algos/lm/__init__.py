"""GRPO for language policies: a small causal transformer trained on a verifiable arithmetic
task, single-agent and WideSeek-R1-style multi-agent.

Modules (only :mod:`config`, :mod:`tokenizer`, :mod:`task`, :mod:`agents` and :mod:`reward`
import without torch):

- :mod:`~rlinf_algos.lm.config`: pydantic models of the example YAML sections;
- :mod:`~rlinf_algos.lm.tokenizer`: the character-level tokenizer;
- :mod:`~rlinf_algos.lm.task`: problems, formats and the exact verifier;
- :mod:`~rlinf_algos.lm.model`: the transformer, KV-cached sampling, log-probs, save/load;
- :mod:`~rlinf_algos.lm.agents`: single and hierarchical (lead + subagents) episodes;
- :mod:`~rlinf_algos.lm.reward`, :mod:`~rlinf_algos.lm.workers`: the reward, rollout,
  reference and actor components;
- :mod:`~rlinf_algos.lm.sft`: the supervised warm start;
- :mod:`~rlinf_algos.lm.trainer`: the in-process loop and evaluation;
- :mod:`~rlinf_algos.lm.algorithm`: the ``grpo_lm`` algorithm class for ``rlinf train``.

Run an example in this process: ``python -m rlinf_algos.lm examples/grpo_arith.yaml``.
"""
