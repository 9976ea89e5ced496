"""Resuming a GRPO run: which checkpoint is whole (checked without loading it), the fingerprint
that keeps another run's checkpoints from ever being resumed, and the sampler that gives pass k
of the data the same permutation after a resume as in an uninterrupted run."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from trl.trainer.utils import RepeatSampler

from rlvr.grpo.distributed import world_size

FINGERPRINT_FILE = "fingerprint.json"
RUNNING_MEAN_FILE = "running_mean.json"  # the running-mean baseline (PipelineGRPOTrainer saves it)
WEIGHT_FILES = ("model.safetensors", "adapter_model.safetensors")
SAFETENSORS_MAX_HEADER = 100_000_000  # the format's own limit on its JSON header (safetensors 0.x)
TORCH_STATE_FILES = ("optimizer.pt", "scheduler.pt")  # torch.save's zip format


def _safetensors_problem(file: Path) -> str | None:
    """Why a safetensors file is unreadable: its header must parse and its size must match. The
    header's length is checked against the file before it is read: a crafted one (2**63, or
    gigabytes) must not crash or exhaust the resume check."""
    try:
        size = file.stat().st_size
        with open(file, "rb") as handle:
            (header_len,) = struct.unpack("<Q", handle.read(8))
            if header_len > min(size - 8, SAFETENSORS_MAX_HEADER):
                return f"{file.name} is unreadable (its header claims {header_len} bytes)"
            header = json.loads(handle.read(header_len))
        end = max(
            (v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0
        )
        if file.stat().st_size != 8 + header_len + end:
            return (
                f"{file.name} is truncated ({file.stat().st_size} of {8 + header_len + end} bytes)"
            )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error) as error:
        return f"{file.name} is unreadable ({type(error).__name__})"
    return None


def rng_state_files(ranks: int) -> list[str]:
    """The RNG states a checkpoint of a run with `ranks` processes holds (the Trainer's names).

    >>> rng_state_files(1), rng_state_files(2)
    (['rng_state.pth'], ['rng_state_0.pth', 'rng_state_1.pth'])
    """
    return ["rng_state.pth"] if ranks == 1 else [f"rng_state_{r}.pth" for r in range(ranks)]


def checkpoint_problem(
    folder: str | Path, extra_files: Sequence[str] = (), ranks: int | None = None
) -> str | None:
    """Why a checkpoint cannot be resumed, or None when every file it needs is whole.

    Checked without loading anything: trainer_state.json parses, the weights' safetensors header
    and size agree, the optimizer and scheduler states and every rank's RNG state (`ranks`: this
    run's processes) are complete zip files, and `extra_files` (state of our own, e.g. the
    running-mean baseline) are there. Each rank writes its own RNG state, the main process
    trainer_state.json: a kill can leave one without the other.
    """
    folder = Path(folder)
    try:
        json.loads((folder / "trainer_state.json").read_text())
    except FileNotFoundError:
        return "trainer_state.json is missing"
    except (OSError, ValueError):
        return "trainer_state.json is unreadable"
    weights = [folder / name for name in WEIGHT_FILES if (folder / name).exists()]
    weights += sorted(folder.glob("*model-*-of-*.safetensors"))  # a sharded large model
    if not weights:
        return f"no weights ({' or '.join(WEIGHT_FILES)})"
    rng = [folder / name for name in rng_state_files(ranks or world_size())]
    for file in weights:
        problem = _safetensors_problem(file)
        if problem:
            return problem
    for file in [*(folder / name for name in TORCH_STATE_FILES), *rng]:
        if not file.exists():
            return f"{file.name} is missing"
        if not zipfile.is_zipfile(file):
            return f"{file.name} is truncated or unreadable"
    for name in extra_files:
        try:
            json.loads((folder / name).read_text())
        except FileNotFoundError:
            return f"{name} is missing"
        except (OSError, ValueError):
            return f"{name} is unreadable"
    return None


def last_checkpoint(
    folder: str | Path | None,
    extra_files: Sequence[str] = (),
    warn: bool = False,
    ranks: int | None = None,
) -> str | None:
    """The newest checkpoint-N in folder that can be resumed, or None.

    A checkpoint cut short by a kill (the Trainer writes trainer_state.json last) or damaged later
    is skipped; with warn=True each skipped one gets a one-line warning naming it and why.
    """
    if folder is None or not Path(folder).is_dir():
        return None
    numbered = sorted(
        (
            (int(p.name.split("-")[1]), p)
            for p in Path(folder).glob("checkpoint-*")
            if p.name.split("-")[1].isdigit()
        ),
        reverse=True,
    )
    for _, candidate in numbered:
        problem = checkpoint_problem(candidate, extra_files, ranks)
        if problem is None:
            return str(candidate)
        if warn:
            print(f"train: skipping damaged checkpoint {candidate}: {problem}", file=sys.stderr)
    return None


def fingerprint(*parts: Any) -> str:
    """A stable hash of what a run depends on (params, base model and data file contents)."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            files = (
                sorted(p for p in part.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
                if part.is_dir()
                else [part]
            )
            for file in files:
                digest.update(str(file.relative_to(part) if part.is_dir() else file.name).encode())
                digest.update(file.read_bytes())
        else:
            digest.update(json.dumps(part, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def resumable_checkpoint(
    folder: str | Path, run_fingerprint: str, extra_files: Sequence[str] = ()
) -> str | None:
    """The newest whole checkpoint of this very run in the folder, if there is one.

    Checkpoints of a different run (other params, base model or data) are deleted so they can
    never be resumed by mistake; damaged ones are skipped with a warning (last_checkpoint), and if
    none is whole the run starts over.
    """
    folder = Path(folder)
    marker = folder / FINGERPRINT_FILE
    if folder.exists():
        try:
            recorded = json.loads(marker.read_text())["fingerprint"]
        except (OSError, ValueError, KeyError, TypeError):  # missing, or cut short by a kill
            recorded = None
        if recorded != run_fingerprint:
            if any(folder.glob("checkpoint-*")):
                print(
                    f"train: the checkpoints in {folder} are of another run (params, data, base "
                    "model or code differ): starting over",
                    file=sys.stderr,
                )
            for entry in folder.iterdir():  # its contents: the folder may be a mounted disk
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"fingerprint": run_fingerprint}) + "\n")
    return last_checkpoint(folder, extra_files, warn=True)


class EpochReplaySampler(RepeatSampler):
    """TRL's RepeatSampler whose pass over the data is a function of the epoch, not of history.

    RepeatSampler seeds its generator once and draws a new permutation on every pass, so pass k
    uses the k-th permutation of the seeded generator. A resumed Trainer builds a fresh sampler
    and never replays the passes before the checkpoint, so without this it restarts from the first
    permutation. The Trainer calls set_epoch(epoch) before each pass (also after a resume); the
    generator is then reseeded and the earlier permutations are drawn again, so pass k gets the
    very permutation an uninterrupted run gives it.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.epoch: int | None = None  # None until the Trainer calls set_epoch
        self._next_pass = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self):
        pass_index = self._next_pass if self.epoch is None else self.epoch
        self._next_pass = pass_index + 1
        if self.shuffle and self.seed is not None:
            self.generator.manual_seed(self.seed)
            for _ in range(pass_index):
                torch.randperm(self.num_samples, generator=self.generator)
        yield from super().__iter__()
