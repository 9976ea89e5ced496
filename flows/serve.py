"""Serve the nightly pipeline deployment from this one process, on prefect.yaml's schedule.

    python -m flows.serve               (needs a Prefect server: see the README)

The schedule is read from prefect.yaml, so `prefect deploy` (work pool + worker) and this
single-process way run the same flow on the same cron. Stop it with SIGTERM (Ctrl-C in a terminal).
"""

from __future__ import annotations

from pathlib import Path

from ruamel.yaml import YAML

from flows.pipeline import ROOT, pipeline


def nightly_schedule(prefect_yaml: Path = ROOT / "prefect.yaml") -> dict:
    """The nightly deployment's name, cron and timezone as declared in prefect.yaml."""
    config = YAML(typ="safe").load(prefect_yaml.read_text())
    (deployment,) = [d for d in config["deployments"] if d["name"] == "nightly"]
    (schedule,) = deployment["schedules"]
    return {"name": deployment["name"], "cron": schedule["cron"],
            "timezone": schedule.get("timezone", "UTC")}


if __name__ == "__main__":
    from prefect.schedules import Cron

    spec = nightly_schedule()
    pipeline.serve(name=spec["name"], schedules=[Cron(spec["cron"], timezone=spec["timezone"])])
