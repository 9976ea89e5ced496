"""The shared DVC remote: `dvc push` and `dvc pull` with a failure as one line naming the remote
and what was kept. DVC does the transfer: content-addressed, each file uploaded to a temporary
name and renamed, so a push cut off half-way leaves no damaged object and the next push sends
only what is missing. A pull re-hashes what it downloads (the remote's `verify`).

Every command that talks to the remote runs as `python -m rlvr.team.remote <dvc args>`: DVC with
the checks OpenSSH makes, the server's host key in known_hosts (~/.ssh/known_hosts, or the file
$RLVR_SSH_KNOWN_HOSTS names) and no SSH agent used or forwarded. dvc-ssh 4.3 passes sshfs no
known_hosts, and sshfs 2026.8 then sets it to None, which turns asyncssh's host-key check off
(sshfs/spec.py: `_client_args.setdefault("known_hosts", None)`); dvc-ssh also forwards the agent
unless told not to (`agent_forwarding` defaults to True)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from rlvr.core.errors import PipelineError
from rlvr.orchestration.runs import run_dvc, tool_env
from rlvr.team.trust import redacted

KNOWN_HOSTS_ENV = "RLVR_SSH_KNOWN_HOSTS"


def known_hosts() -> str:
    """The known_hosts file every SSH connection checks the server's key against."""
    return os.environ.get(KNOWN_HOSTS_ENV) or str(Path.home() / ".ssh" / "known_hosts")


def strict_ssh() -> None:
    """Make every dvc-ssh connection of this process check the host key and use no agent.

    Overrides dvc_ssh.SSHFileSystem._prepare_credentials, a private method (dvc-ssh 4.3.0);
    guarded by tests/team/test_remote.py::test_a_server_whose_host_key_is_not_known_is_refused
    (fails when the override stops taking effect) and ...::test_dvc_runs_without_the_ssh_agent."""
    from dvc_ssh import SSHFileSystem

    original = SSHFileSystem._prepare_credentials
    if getattr(original, "strict", False):
        return

    def prepare(self, **config):
        info = original(self, **config)
        hosts = known_hosts()
        if not Path(hosts).is_file():  # asyncssh would read none and check nothing
            raise OSError(
                f"no known_hosts file at {hosts}: add the DVC remote's host key there "
                f"(ssh-keyscan -p PORT HOST >> {hosts}, then check it) or name one in "
                f"${KNOWN_HOSTS_ENV}"
            )
        info["known_hosts"] = hosts
        info["agent_path"] = None  # no agent for the login
        info["agent_forwarding"] = False  # and none handed to the server
        return info

    prepare.strict = True
    SSHFileSystem._prepare_credentials = prepare


class RemoteFailed(PipelineError):
    """A push or pull did not complete; the message names the remote and what is kept."""


def default_remote(root: str | Path) -> tuple[str, str] | None:
    """(name, url) of the repository's default DVC remote, or None when it has none."""
    run = run_dvc(root, "remote", "default")  # DVC 3: "No default remote set", exit 1, if none
    name = run.stdout.strip()
    if run.returncode != 0 or not name:
        return None
    url = run_dvc(root, "config", f"remote.{name}.url").stdout.strip() or "?"
    return name, redacted(url)  # what the messages show: never a password in the URL


def dvc_error(output: str) -> str:
    """DVC's first ERROR line, without its boilerplate: the cause (`Permission denied for user
    root`), where the last is its consequence (`6 files failed to download`)."""
    errors = [line for line in output.splitlines() if line.startswith("ERROR:")]
    text = errors[0] if errors else (output.strip().splitlines() or ["no output"])[-1]
    return re.sub(r"^ERROR:\s*(unexpected error - )?", "", text).strip()


def _where(root: str | Path) -> tuple[str, str]:
    found = default_remote(root)
    if found is None:
        raise RemoteFailed(
            f"{root}: no default DVC remote: add one with `dvc remote add -d <name> <url>` "
            "(docs/reliability.md)"
        )
    return found


def _cache_dir(root: str | Path) -> str:
    """Where this repository's DVC cache is (a shared one when `cache.dir` is set)."""
    return run_dvc(root, "cache", "dir").stdout.strip() or str(Path(root) / ".dvc" / "cache")


def remote_dvc(root: str | Path, *args: str) -> subprocess.CompletedProcess:
    """`dvc <args>` in root for a command that talks to the DVC remote: through this module's
    main (strict_ssh), with no SSH agent in its environment."""
    env = {k: v for k, v in tool_env().items() if k != "SSH_AUTH_SOCK"}
    command = [sys.executable, "-m", "rlvr.team.remote", *args]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, env=env)


def verify_pulls(root: str | Path, name: str) -> None:
    """Have DVC re-hash each object it pulls from remote `name` (`verify`, in the repository's
    config.local): a damaged or forged object on the remote fails the pull, never lands."""
    if run_dvc(root, "config", f"remote.{name}.verify").stdout.strip().lower() != "true":
        run = run_dvc(root, "remote", "modify", "--local", name, "verify", "true")
        if run.returncode != 0:
            raise RemoteFailed(
                f"dvc remote modify {name} verify true failed: {dvc_error(run.stderr)}"
            )


def push(root: str | Path) -> str:
    """`dvc push` to the default remote; DVC's summary line, or RemoteFailed."""
    name, url = _where(root)
    run = remote_dvc(root, "push")
    if run.returncode != 0:
        raise RemoteFailed(
            f"dvc push to remote '{name}' ({url}) failed: {dvc_error(run.stdout + run.stderr)}; "
            f"kept locally: every output in {_cache_dir(root)} and dvc.lock: rerun "
            "`dvc push` once the remote answers (it sends only what is missing)"
        )
    return (run.stdout.strip().splitlines() or ["pushed"])[-1]


def pull(root: str | Path, *targets: str) -> str:
    """`dvc pull --allow-missing` from the default remote (an output never pushed is left for
    `dvc repro` to rebuild), of every output or of `targets` and what they depend on; DVC's
    summary line, or RemoteFailed."""
    name, url = _where(root)
    verify_pulls(root, name)
    run = remote_dvc(
        root, "pull", "--allow-missing", *(["--with-deps", *targets] if targets else [])
    )
    if run.returncode != 0:
        raise RemoteFailed(
            f"dvc pull from remote '{name}' ({url}) failed: {dvc_error(run.stdout + run.stderr)}; "
            "nothing was restored: make the remote reachable, or run without it and every stage "
            "trains again"
        )
    return (run.stdout.strip().splitlines() or ["pulled"])[-1]


def main(argv: list[str]) -> int:
    """`dvc <argv>` with strict_ssh."""
    strict_ssh()
    from dvc.cli import main as dvc_main

    return dvc_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
