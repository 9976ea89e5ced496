"""Runs whose worker died end Crashed: the team's deployments (prefect.yaml: `experiment-run`,
`nightly`) send flow run heartbeats every HEARTBEAT_SECONDS, and an automation on the server
(Prefect's "Detect zombie flows") marks a run of theirs Crashed when SILENT_HEARTBEATS of them are
missed. A killed worker's run would otherwise stay Running: the experiments flow would wait for
it, and the nightly's concurrency slot would stay taken until its lease ran out."""

from __future__ import annotations

from datetime import timedelta

CRASH_AUTOMATION = "rlvr: crash flow runs whose heartbeats stopped"
HEARTBEAT_SECONDS = 30  # PREFECT_FLOWS_HEARTBEAT_FREQUENCY of the deployments (Prefect's minimum)
SILENT_HEARTBEATS = 3  # a run silent this many heartbeats is Crashed by the automation
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "CRASHED")
EXPERIMENT_FLOW = "grpo-experiment-run"  # flows/experiments.py experiment_run
NIGHTLY_FLOW = "grpo-nightly"  # flows/nightly.py nightly
# the flows whose deployments send heartbeats that often (tests/test_prefect_yaml.py)
WATCHED = (EXPERIMENT_FLOW, NIGHTLY_FLOW)


def ensure_crash_detection() -> str:
    """Create (once per server) the automation that marks a run of the flows in WATCHED Crashed
    when its heartbeats stop (Prefect's "Detect zombie flows" automation), or update the one
    there when its trigger or action differ from these (the heartbeat settings changed); its
    name."""
    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    wanted = Automation(
        name=CRASH_AUTOMATION,
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={
                "prefect.flow-run.heartbeat",
                *(f"prefect.flow-run.{s.title()}" for s in FINAL),
            },
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            # only the flows whose deployments send heartbeats this often: one whose heartbeats
            # come every 180 s (Prefect's default) would otherwise be crashed between two of them
            match_related=ResourceSpecification(
                {"prefect.resource.role": "flow", "prefect.resource.name": list(WATCHED)}
            ),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=HEARTBEAT_SECONDS * SILENT_HEARTBEATS),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message=f"no heartbeat for {HEARTBEAT_SECONDS * SILENT_HEARTBEATS} s: its "
                "worker or machine is gone",
            )
        ],
    )
    try:
        there = Automation.read(name=CRASH_AUTOMATION)
    except ValueError:  # none yet
        wanted.create()
        return CRASH_AUTOMATION

    def settings(automation) -> list:
        return [
            automation.trigger.model_dump(mode="json", exclude={"id"}),
            [action.model_dump(mode="json") for action in automation.actions],
        ]

    if settings(there) != settings(wanted):
        there.trigger, there.actions = wanted.trigger, wanted.actions
        there.update()
    return CRASH_AUTOMATION
