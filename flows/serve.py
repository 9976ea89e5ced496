"""Serve the nightly deployment (flows/nightly.py) from this one process, on prefect.yaml's schedule.

    python -m flows.serve               (needs a Prefect server: see the README)

The schedule and the concurrency limit are read from prefect.yaml, so `prefect deploy` (work pool
+ worker) and this single-process way run the same flow on the same cron, one run at a time. Stop
it with SIGTERM (Ctrl-C in a terminal).
"""

from __future__ import annotations

from pathlib import Path

from prefect.client.schemas.objects import ConcurrencyLimitConfig
from prefect.schedules import Cron
from ruamel.yaml import YAML

from flows import ROOT
from flows.nightly import nightly


def nightly_schedule(prefect_yaml: Path = ROOT / "prefect.yaml") -> dict:
    """The nightly deployment's name, cron, timezone and concurrency limit (the mapping, or None)
    as declared in prefect.yaml."""
    config = YAML(typ="safe").load(prefect_yaml.read_text())
    (deployment,) = [d for d in config["deployments"] if d["name"] == "nightly"]
    (schedule,) = deployment["schedules"]
    return {
        "name": deployment["name"],
        "cron": schedule["cron"],
        "timezone": schedule.get("timezone", "UTC"),
        "concurrency_limit": deployment.get("concurrency_limit"),
    }


def serve_options(spec: dict) -> dict:
    """Flow.serve's keyword arguments for the nightly spec: its cron, and prefect.yaml's
    deployment concurrency limit as serve's `global_limit` (Prefect 3.9.1)."""
    limit = spec["concurrency_limit"]
    return {
        "name": spec["name"],
        "schedules": [Cron(spec["cron"], timezone=spec["timezone"])],
        "global_limit": ConcurrencyLimitConfig(**limit) if limit else None,
    }


if __name__ == "__main__":
    nightly.serve(**serve_options(nightly_schedule()))
