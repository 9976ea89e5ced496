"""Real servers for the tests, on 127.0.0.1 only, started and stopped by the tests.

PrefectServer: `prefect server start` with a database of its own and the work pool rlvr-process;
the processes a test starts through it (workers, flows) are stopped with it or by the test.

SSHServer: OpenSSH's sshd (Debian's openssh-server; .ci/run installs it, pinned) serving a folder
as a DVC remote over SFTP, reached with DVC's own SSH plugin (dvc-ssh). Its keys, its config and
the client's ~/.ssh (known_hosts naming this server, its key as id_ed25519) live in one folder;
`env()` points HOME there, so asyncssh (under dvc-ssh) trusts this server and logs in, and the
user's own ~/.ssh is never read or written.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

from rlvr.grpo.distributed import free_port

# RLVR_SSHD names another sshd program (tests/team/test_without_sshd.py names a missing one)
SSHD = os.environ.get("RLVR_SSHD") or shutil.which("sshd") or "/usr/sbin/sshd"
NO_SSHD = "sshd is not installed (apt-get install openssh-server; .ci/run does)"


PREFECT = str(Path(sys.executable).parent / "prefect")
POOL = "rlvr-process"


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rlvr-test", "-f", str(path)],
        check=True,
    )


class SSHServer:
    """sshd on 127.0.0.1:<port> that lets the current user in with a key of its own; `storage`
    is the folder a DVC remote points at."""

    def __init__(self, folder: Path, port: int | None = None):
        need_sshd()  # before anything runs ssh-keygen or makes a folder
        self.folder = folder
        self.port = port or free_port()
        self.user = getpass.getuser()
        self.home = folder / "home"  # the client's HOME: .ssh/known_hosts names this server
        self.storage = folder / "storage"
        self.client_key = folder / "client_ed25519"
        self.process: subprocess.Popen | None = None
        folder.mkdir(parents=True, exist_ok=True)
        self.storage.mkdir(exist_ok=True)
        host_key = folder / "host_ed25519"
        if not host_key.exists():
            _keygen(host_key)
            _keygen(self.client_key)
        (folder / "authorized_keys").write_text(self.client_key.with_suffix(".pub").read_text())
        (self.home / ".ssh").mkdir(parents=True, exist_ok=True)
        # the client's own default key: a clone with no keyfile in its DVC config (the nightly's)
        # logs in as a worker with its own ~/.ssh would
        own = self.home / ".ssh" / "id_ed25519"
        shutil.copyfile(self.client_key, own)
        own.chmod(0o600)
        key = host_key.with_suffix(".pub").read_text().split()[:2]
        (self.home / ".ssh" / "known_hosts").write_text(
            f"[127.0.0.1]:{self.port} {' '.join(key)}\n"
        )
        self.config = folder / "sshd_config"
        self.config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {host_key}",
                    f"AuthorizedKeysFile {folder / 'authorized_keys'}",
                    f"PidFile {folder / 'sshd.pid'}",
                    f"AllowUsers {self.user}",
                    "StrictModes no",
                    "UsePAM no",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "Subsystem sftp internal-sftp",
                    "LogLevel ERROR",
                    "",
                ]
            )
        )

    @property
    def url(self) -> str:
        return f"ssh://127.0.0.1:{self.port}{self.storage}"

    def start(self) -> SSHServer:
        if os.geteuid() == 0:  # sshd as root insists on its privilege-separation folder
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.folder / "sshd.log", "ab"),  # noqa: SIM115 (the server's lifetime)
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"sshd exited {self.process.returncode}: "
                    f"{(self.folder / 'sshd.log').read_text()[-2000:]}"
                )
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd did not listen on 127.0.0.1:{self.port} within 20 s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=20)
        self.process = None

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment whose HOME trusts this server's host key."""
        return {**(base if base is not None else os.environ), "HOME": str(self.home)}

    def add_remote(
        self, repo: Path, name: str = "team", env: dict | None = None, folder: str = ""
    ) -> None:
        """`dvc remote add -d <name> ssh://...` with this server's port, user and key: the url in
        .dvc/config (committed), the key in .dvc/config.local (never committed). folder: a storage
        of the test's own under the server's (the server serves a whole xdist worker's session:
        a test that needs an empty remote must not see what another test pushed)."""
        url = f"{self.url}/{folder}" if folder else self.url
        for args in (
            ["remote", "add", "-f", "-d", name, url],
            ["remote", "modify", name, "user", self.user],
            ["remote", "modify", "--local", name, "keyfile", str(self.client_key)],
        ):
            subprocess.run(
                ["dvc", *args], cwd=repo, check=True, env=env or self.env(), capture_output=True
            )


def sshd_available() -> bool:
    return Path(SSHD).exists() and shutil.which("ssh-keygen") is not None


def need_sshd() -> None:
    """Skip the calling test, in one line, when OpenSSH's server is missing; a failure instead
    under RLVR_REQUIRE_SERVERS (.ci/run sets it), so CI never passes on skipped remote tests."""
    if sshd_available():
        return
    import pytest

    if os.environ.get("RLVR_REQUIRE_SERVERS"):
        pytest.fail(NO_SSHD, pytrace=False)
    pytest.skip(NO_SSHD)


def stop_group(process: subprocess.Popen, how: int = signal.SIGTERM) -> None:
    """Stop a process started in a session of its own, with everything it started."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, how)  # a served / worker process ignores SIGINT
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


class PrefectServer:
    """`prefect server start` on 127.0.0.1:<port>, its PREFECT_HOME in `folder`, and the process
    work pool the deployments of prefect.yaml name."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}/api"
        self.logs = folder / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        # as the README says, on any port: the UI's own API address too (it would assume 4200)
        # no PYTHONPATH (the tests' points at this checkout): a worker runs its clone's code
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            "PREFECT_HOME": str(folder / "prefect-home"),
            "PREFECT_API_URL": self.api,
            "PREFECT_UI_API_URL": self.api,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            # workers ask for scheduled runs every 2 s, not 10 (Prefect 3.9's WorkerSettings):
            # each run a test waits for starts sooner
            "PREFECT_WORKER_QUERY_SECONDS": "2",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        }
        self.started: list[subprocess.Popen] = []

    def background(self, name: str, *command: str, cwd: Path, env: dict | None = None):
        """A process in a session of its own, its output in logs/<name>.log."""
        process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env={**self.env, **(env or {})},
            start_new_session=True,
            stdout=open(self.logs / f"{name}.log", "w"),  # noqa: SIM115 (the process's lifetime)
            stderr=subprocess.STDOUT,
        )
        self.started.append(process)
        return process

    def log(self, name: str, tail: int = 6000) -> str:
        return (self.logs / f"{name}.log").read_text()[-tail:]

    def cli(self, *args: str, cwd: Path, env: dict | None = None) -> str:
        run = subprocess.run(
            [PREFECT, *args],
            cwd=cwd,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        return run.stdout + run.stderr

    def api_get(self, path: str) -> dict:
        with urllib.request.urlopen(f"{self.api}{path}", timeout=30) as response:
            return json.loads(response.read())

    def state(self, flow_run_id: str) -> str:
        return self.api_get(f"/flow_runs/{flow_run_id}")["state"]["type"]

    def wait(self, flow_run_id: str, timeout: float, log: str) -> str:
        """The flow run's final state type; TimeoutError with the log `log` if it has none."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.state(flow_run_id)
            if state in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                return state
            time.sleep(3)
        raise TimeoutError(f"flow run {flow_run_id} still running; {log}.log:\n{self.log(log)}")

    def start(self) -> PrefectServer:
        server = self.background(
            "server",
            PREFECT,
            "server",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            cwd=self.folder,
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise RuntimeError(f"the Prefect server exited: {self.log('server')}")
            try:
                self.api_get("/health")
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise TimeoutError(f"no healthy Prefect server at {self.api}")
        self.cli("work-pool", "create", POOL, "--type", "process", cwd=self.folder)
        return self

    def stop(self) -> None:
        for process in reversed(self.started):
            stop_group(process)


def training(worker: subprocess.Popen) -> bool:
    """Whether a worker's flow run is training now (a `stages.train` process under it)."""
    try:
        children = psutil.Process(worker.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return False
    for child in children:
        try:
            if "stages.train" in " ".join(child.cmdline()):
                return True
        except psutil.Error:  # gone, or a zombie, since the listing
            pass
    return False


def kill_machine(worker: subprocess.Popen) -> None:
    """SIGKILL the worker and everything under it, as a machine that is lost."""
    processes = [psutil.Process(worker.pid), *psutil.Process(worker.pid).children(recursive=True)]
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    worker.wait(timeout=30)
