"""Prefect flows: run the DVC stages on a schedule and publish versioned artifacts.

Importing the package sets Prefect's home before anything imports prefect: `.prefect/` in the
repository (never the user's ~/.prefect), with analytics off; a PREFECT_HOME already set wins.
"""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PREFECT_HOME", str(ROOT / ".prefect"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
