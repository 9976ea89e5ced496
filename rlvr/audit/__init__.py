"""Evaluation and what is judged from it: pass@k, slices, the recipe, alarms, smoke checks, the
diagnosis."""
