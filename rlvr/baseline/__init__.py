"""Baselines the audit sets beside GRPO (rlvr.baseline.rft)."""
