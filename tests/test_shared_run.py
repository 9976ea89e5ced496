"""The slow tests' cold run is made once for the whole session (README: "made once for both
cores"): tests.helpers.made_once, called at once from several processes, makes it once; the
others wait and find it whole; a half-made one is made again."""

import multiprocessing
import time
from pathlib import Path

from tests.helpers import made_once


def _make(path: Path) -> None:
    path.mkdir()
    with open(path.parent.parent / "makes.log", "a") as log:
        log.write("made\n")
    time.sleep(0.5)  # long enough that the other callers arrive while it is being made
    (path / "whole").write_text("yes")


def _ask(path: str, results) -> None:
    made = made_once(Path(path), _make)
    results.put((str(made), (made / "whole").read_text()))


def test_several_processes_asking_at_once_make_it_once(tmp_path):
    target = tmp_path / "shared" / "run"
    results = multiprocessing.get_context("spawn").Queue()
    workers = [
        multiprocessing.get_context("spawn").Process(target=_ask, args=(str(target), results))
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    assert sorted(results.get(timeout=5) for _ in workers) == [(str(target), "yes")] * 3
    assert (tmp_path / "makes.log").read_text() == "made\n"


def test_a_half_made_one_is_made_again(tmp_path):
    target = tmp_path / "shared" / "run"
    target.mkdir(parents=True)  # its maker was killed: no mark that it is whole
    (target / "partial").write_text("")
    assert made_once(target, _make) == target
    assert (target / "whole").read_text() == "yes" and not (target / "partial").exists()
    assert made_once(target, _make) == target  # whole now: not made a second time
    assert (tmp_path / "makes.log").read_text() == "made\n"
