"""The embodied family (``ppo``, ``sac``, ``grpo``): a :class:`~rlinf_algos.embodied.recipe.Recipe` run as a
flow by the one driver, in one process or on env, rollout and actor workers."""
