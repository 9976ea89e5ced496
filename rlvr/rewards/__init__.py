"""Rewards: verifiers, composition, the length term, GRPO's group math, and the registries.

    verifiers.py     countdown, exact_match, regex: score one answer against one row
    math_answers.py  the math verifier (math_worker.py parses in a process of its own,
                     math_values.py reads values and tolerances)
    shaping.py       weighted composition and the Kimi k1.5 length term
    grpo_math.py     group advantages, grpo_score, the k3 KL: pure functions
    registry.py      the reward functions TRL calls, the verifiers by type

Import the module you need: this package's __init__ imports nothing, so a stage that checks
reward names runs no code it does not use (dvc.yaml's code deps follow the imports). Importing
it does not import torch.
"""
