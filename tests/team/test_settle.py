"""Experiments that finish what they start (rlvr.team.spread.settle), against a fake Prefect
client and clock: a crashed run is submitted again (twice at most), a failed or cancelled one
waits for the others and names itself with what finished, a run no worker starts within the
deadline is cancelled naming the pool; nothing waits forever."""

from dataclasses import dataclass, field
from datetime import timedelta
from types import SimpleNamespace

import pytest

from rlvr.team.spread import Run, RunsFailed, settle

POOL = "rlvr-process"


@dataclass
class Fake:
    """Flow runs whose states follow a script: run name -> [state type per poll, per submission]."""

    scripts: dict[str, list[list[str]]]
    now: float = 0.0
    ids: dict[str, tuple[str, int]] = field(default_factory=dict)  # id -> (name, submission)
    polls: dict[str, int] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)

    def submit(self, run: Run) -> str:
        submission = sum(1 for name, _ in self.ids.values() if name == run.name)
        flow_id = f"{run.name}-{submission}"
        self.ids[flow_id] = (run.name, submission)
        return flow_id

    def read_flow_run(self, flow_id: str):
        name, submission = self.ids[flow_id]
        script = self.scripts[name][submission]
        if flow_id in self.cancelled:
            kind = "CANCELLED"
        else:
            step = self.polls.get(flow_id, 0)
            self.polls[flow_id] = step + 1
            kind = script[min(step, len(script) - 1)]
        state = SimpleNamespace(type=SimpleNamespace(value=kind), message=f"{kind.lower()} here")
        return SimpleNamespace(
            name=f"exp-{flow_id}", state=state, total_run_time=timedelta(seconds=12)
        )

    def set_flow_run_state(self, flow_id, state, force=False):
        assert force and state.type.value == "CANCELLED"
        self.cancelled.append(flow_id)

    def settle(self, names: list[str], deadline: float = 100) -> dict:
        def sleep(seconds: float) -> None:
            self.now += 10  # each poll: 10 s of the fake clock

        return settle(
            [Run(n) for n in names],
            self.submit,
            self,
            POOL,
            2,
            self.said.append,
            0,
            deadline,
            clock=lambda: self.now,
            sleep=sleep,
        )


def test_every_run_completing_after_crashes_is_done():
    fake = Fake(
        {
            "a": [["RUNNING", "COMPLETED"]],
            "b": [["CRASHED"], ["PENDING", "CRASHED"], ["RUNNING", "COMPLETED"]],  # crashed twice
        }
    )
    done = fake.settle(["a", "b"])
    assert done["a"] == {"flow_run": "exp-a-0", "worker_seconds": 12.0, "submissions": 1}
    assert done["b"]["submissions"] == 3 and done["b"]["flow_run"] == "exp-b-2"
    assert sum("crashed (crashed here): submitted again" in s for s in fake.said) == 2


def test_a_run_crashing_a_third_time_fails_after_the_others_end():
    fake = Fake({"a": [["RUNNING"] * 6 + ["COMPLETED"]], "b": [["CRASHED"]] * 3})
    with pytest.raises(RunsFailed) as failed:
        fake.settle(["a", "b"])
    assert set(failed.value.done) == {"a"}  # a ran to its end: taken in, not cancelled
    assert str(failed.value) == (
        "1 of 2 run(s) did not complete: b: flow run exp-b-2 crashed: crashed here"
    )
    assert fake.cancelled == []


def test_a_failed_and_a_cancelled_run_wait_for_the_others_and_name_themselves():
    fake = Fake(
        {
            "a": [["RUNNING", "FAILED"]],
            "b": [["CANCELLED"]],
            "c": [["RUNNING"] * 5 + ["COMPLETED"]],
        }
    )
    with pytest.raises(RunsFailed) as failed:
        fake.settle(["a", "b", "c"])
    assert set(failed.value.done) == {"c"}
    message = str(failed.value)
    assert message.startswith("2 of 3 run(s) did not complete: ")
    assert "a: flow run exp-a-0 failed: failed here" in message
    assert "b: flow run exp-b-0 cancelled: cancelled here" in message


@pytest.mark.parametrize("waiting", ["SCHEDULED", "PENDING"], ids=["late", "pending"])
def test_a_run_no_worker_starts_is_cancelled_naming_the_pool(waiting):
    """No worker on the pool (Scheduled, then Late) or a worker dead before its engine started
    (Pending): cancelled at the deadline, not waited for forever."""
    fake = Fake({"a": [["RUNNING", "COMPLETED"]], "b": [[waiting]]})
    with pytest.raises(RunsFailed) as failed:
        fake.settle(["a", "b"], deadline=60)
    assert fake.cancelled == ["b-0"] and set(failed.value.done) == {"a"}
    assert str(failed.value) == (
        "1 of 2 run(s) did not complete: b: no worker of the pool rlvr-process started flow run "
        "exp-b-0 within 60 s (orchestration.start_deadline): cancelled; start one: prefect "
        "worker start --pool rlvr-process"
    )
    assert 60 < fake.now <= 80  # cancelled at the first poll past the deadline


def test_a_running_run_is_never_cancelled_by_the_deadline():
    fake = Fake({"a": [["PENDING", "RUNNING"] + ["RUNNING"] * 30 + ["COMPLETED"]]})
    assert set(fake.settle(["a"], deadline=60)) == {"a"} and fake.cancelled == []


def test_the_crash_automation_is_created_once_and_updated_when_its_settings_change(
    prefect_harness, monkeypatch
):
    from prefect.automations import Automation

    from rlvr.team import crashes

    def within() -> float:
        return Automation.read(name=crashes.CRASH_AUTOMATION).trigger.within.total_seconds()

    assert crashes.ensure_crash_detection() == crashes.CRASH_AUTOMATION
    first = Automation.read(name=crashes.CRASH_AUTOMATION).id
    assert within() == crashes.HEARTBEAT_SECONDS * crashes.SILENT_HEARTBEATS
    monkeypatch.setattr(crashes, "SILENT_HEARTBEATS", 5)  # the team waits longer for a worker
    crashes.ensure_crash_detection()
    assert within() == crashes.HEARTBEAT_SECONDS * 5
    again = Automation.read(name=crashes.CRASH_AUTOMATION)
    assert again.id == first and "150 s" in again.actions[0].message  # updated, not doubled
    crashes.ensure_crash_detection()  # nothing to change: the same one
    assert Automation.read(name=crashes.CRASH_AUTOMATION).id == first
