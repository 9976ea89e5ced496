"""Prefect flows: run the DVC stages on a schedule and publish versioned artifacts (Step 4)."""
