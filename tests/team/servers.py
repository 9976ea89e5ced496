"""Real servers for the tests, on 127.0.0.1 only, started and stopped by the tests.

SSHServer: OpenSSH's sshd (Debian's openssh-server; .ci/run installs it, pinned) serving a folder
as a DVC remote over SFTP, reached with DVC's own SSH plugin (dvc-ssh). Its keys, its config and
the client's ~/.ssh (known_hosts naming this server, its key as id_ed25519) live in one folder;
`env()` points HOME there, so asyncssh (under dvc-ssh) trusts this server and logs in, and the
user's own ~/.ssh is never read or written.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rlvr-test", "-f", str(path)],
        check=True,
    )


class SSHServer:
    """sshd on 127.0.0.1:<port> that lets the current user in with a key of its own; `storage`
    is the folder a DVC remote points at."""

    def __init__(self, folder: Path, port: int | None = None):
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

    def add_remote(self, repo: Path, name: str = "team", env: dict | None = None) -> None:
        """`dvc remote add -d <name> ssh://...` with this server's port, user and key: the url in
        .dvc/config (committed), the key in .dvc/config.local (never committed)."""
        for args in (
            ["remote", "add", "-f", "-d", name, self.url],
            ["remote", "modify", name, "user", self.user],
            ["remote", "modify", "--local", name, "keyfile", str(self.client_key)],
        ):
            subprocess.run(
                ["dvc", *args], cwd=repo, check=True, env=env or self.env(), capture_output=True
            )


def sshd_available() -> bool:
    return Path(SSHD).exists()
