"""Prefect flows: run the DVC stages on a schedule and publish versioned artifacts.

Importing the package sets Prefect's home before anything imports prefect: `.prefect/` in the
repository (never the user's ~/.prefect), with analytics off; a PREFECT_HOME already set wins.
"""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PREFECT_HOME", str(ROOT / ".prefect"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect.events.worker import EventsWorker  # noqa: E402 - after PREFECT_HOME, above
from prefect.logging.handlers import APILogWorker  # noqa: E402


def drain_prefect() -> None:
    """Send Prefect's queued logs and events now, before a flow's command prints its last line.

    Otherwise Prefect drains them at interpreter exit, and its "Still processing items" warning
    can land after the line that says how the run ended (seen in CI on a loaded machine).
    """
    for worker in (APILogWorker, EventsWorker):
        worker.drain_all(timeout=60, at_exit=False)
