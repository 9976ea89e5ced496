"""The shared DVC remote on a real server: sshd on 127.0.0.1 reached with dvc-ssh
(rlvr.team.remote). A round trip to a fresh clone, the server stopped (one line, the rerun
pushes), a push killed half-way (the rerun completes it)."""

import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from rlvr.team.remote import (
    KNOWN_HOSTS_ENV,
    RemoteFailed,
    known_hosts,
    pull,
    push,
    remote_dvc,
    strict_ssh,
)
from tests.helpers import commit_all, dvc, project_env
from tests.team.servers import SSHServer


def _repo(path: Path, server: SSHServer, files: int = 20, size: int = 4096) -> Path:
    """A git+DVC repository with a tracked folder of random files and the server as its remote."""
    path.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    dvc(path, "init", "-q")
    data = path / "models" / "final"
    data.mkdir(parents=True)
    for i in range(files):
        (data / f"part-{i:04d}.bin").write_bytes(os.urandom(size))
    dvc(path, "add", "models/final")
    server.add_remote(path, env={**project_env(path), "HOME": str(server.home)})
    commit_all(path, "data")
    return path


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.md5(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _objects(server: SSHServer) -> int:
    return (
        sum(1 for p in (server.storage / "files").rglob("*") if p.is_file())
        if (server.storage / "files").exists()
        else 0
    )


def _clone_pulls_the_same(repo: Path, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    (clone / ".dvc" / "config.local").write_text((repo / ".dvc" / "config.local").read_text())
    line = pull(clone)
    assert "fetched" in line or "added" in line, line
    assert _digests(clone / "models" / "final") == _digests(repo / "models" / "final")


def test_push_to_sshd_and_pull_in_a_fresh_clone(ssh_home, tmp_path):
    repo = _repo(tmp_path / "repo", ssh_home)
    before = _objects(ssh_home)
    assert "pushed" in push(repo)
    assert _objects(ssh_home) >= before + 21  # 20 files and the folder's listing
    _clone_pulls_the_same(repo, tmp_path)


def test_server_stopped_is_one_line_and_the_rerun_pushes(tmp_path, monkeypatch):
    server = SSHServer(tmp_path / "sshd").start()  # its own: stopping it leaves the shared one be
    monkeypatch.setenv("HOME", str(server.home))
    repo = _repo(tmp_path / "repo", server)
    server.stop()
    with pytest.raises(RemoteFailed) as failure:
        push(repo)
    line = str(failure.value)
    assert "\n" not in line and line.startswith(
        f"dvc push to remote 'team' ({server.url}) failed: "
    )
    assert "Connect call failed" in line and "kept locally" in line and "rerun `dvc push`" in line
    assert _objects(server) == 0
    server.start()
    assert "21 files pushed" in push(repo)
    assert "Cache and remote 'team' are in sync" in dvc(repo, "status", "--cloud")
    _clone_pulls_the_same(repo, tmp_path)
    server.stop()


def test_a_push_killed_half_way_is_completed_by_the_rerun(ssh_home, tmp_path):
    repo = _repo(tmp_path / "repo", ssh_home, files=200, size=256 * 1024)
    env = project_env(repo)
    before = _objects(ssh_home)
    run = subprocess.Popen(
        ["dvc", "push", "--jobs", "1"],
        cwd=repo,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while _objects(ssh_home) < before + 5 and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.01)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    sent = _objects(ssh_home) - before
    assert 5 <= sent < 201, f"the push was not cut off half-way ({sent} of 201 objects sent)"
    assert "not in sync" in dvc(repo, "status", "--cloud") or "new:" in dvc(
        repo, "status", "--cloud"
    )
    push(repo)
    assert "Cache and remote 'team' are in sync" in dvc(repo, "status", "--cloud")
    _clone_pulls_the_same(repo, tmp_path)


def test_the_prod_model_is_fetched_by_name_in_a_clean_folder(ssh_home, tmp_path):
    """The registry's promise for users: GTO's tags in the git remote, the weights in the DVC
    remote, and `dvc artifacts get <repo> policy --stage prod` brings them to an empty folder."""
    repo = _repo(tmp_path / "repo", ssh_home)
    (repo / "dvc.yaml").write_text(
        "artifacts:\n  policy:\n    path: models/final\n    type: model\n"
    )
    commit_all(repo, "the policy as an artifact")
    push(repo)
    env = {**project_env(repo), "HOME": str(ssh_home.home)}
    for args in (["register", "policy"], ["assign", "policy", "--stage", "prod"]):
        gto = subprocess.run(
            ["gto", *args],
            cwd=repo,
            env={
                **env,
                "GIT_AUTHOR_NAME": "t",
                "GIT_AUTHOR_EMAIL": "t@t",
                "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@t",
            },
            capture_output=True,
            text=True,
        )
        assert gto.returncode == 0, gto.stderr
    shown = subprocess.run(["gto", "show"], cwd=repo, env=env, capture_output=True, text=True)
    assert "│ policy │ v0.0.1   │ v0.0.1  │" in shown.stdout, shown.stdout
    shared = tmp_path / "shared.git"  # the team's git remote: the commits and GTO's tags
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(shared)], check=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    get = subprocess.run(
        [
            "dvc",
            "artifacts",
            "get",
            str(shared),
            "policy",
            "--stage",
            "prod",
            "-o",
            "prod",
            "--remote-config",
            f"keyfile={ssh_home.client_key}",
        ],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
    )
    assert get.returncode == 0, get.stdout + get.stderr
    assert _digests(empty / "prod") == _digests(repo / "models" / "final")


def _key_line(server: SSHServer, key: Path) -> str:
    return f"[127.0.0.1]:{server.port} {' '.join(key.read_text().split()[:2])}\n"


def test_a_server_whose_host_key_is_not_known_is_refused(ssh_home, tmp_path, monkeypatch):
    """dvc-ssh alone checks no host key (sshfs sets known_hosts to None): a server that is not
    the one known_hosts names would get the data. Through rlvr.team.remote the push is refused,
    and with no known_hosts file at all it says where to add the key."""
    repo = _repo(tmp_path / "repo", ssh_home)
    other = tmp_path / "other_host"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    known = tmp_path / "known_hosts"
    known.write_text(_key_line(ssh_home, other.with_suffix(".pub")))  # another server's key
    monkeypatch.setenv(KNOWN_HOSTS_ENV, str(known))
    before = _objects(ssh_home)
    with pytest.raises(RemoteFailed) as failure:
        push(repo)
    line = str(failure.value)
    assert "\n" not in line and "Host key is not trusted" in line, line
    assert _objects(ssh_home) == before  # nothing sent
    monkeypatch.setenv(KNOWN_HOSTS_ENV, str(tmp_path / "missing"))
    with pytest.raises(RemoteFailed, match="no known_hosts file at .*missing: add the DVC"):
        push(repo)
    known.write_text((ssh_home.home / ".ssh" / "known_hosts").read_text())  # the right key
    monkeypatch.setenv(KNOWN_HOSTS_ENV, str(known))
    assert "pushed" in push(repo)


def test_dvc_runs_without_the_ssh_agent(ssh_home, monkeypatch):
    """What talks to the remote gets no SSH_AUTH_SOCK, and every dvc-ssh login names no agent
    and forwards none (dvc-ssh forwards it by default)."""
    from dvc_ssh import SSHFileSystem

    import rlvr.team.remote as remote

    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
    monkeypatch.setenv(KNOWN_HOSTS_ENV, str(ssh_home.home / ".ssh" / "known_hosts"))
    seen = {}
    real = subprocess.run

    def run(command, **kwargs):
        seen.update(command=command, env=kwargs["env"])
        return real(command, **kwargs)

    monkeypatch.setattr(remote.subprocess, "run", run)
    shown = remote_dvc(".", "--version")
    assert shown.returncode == 0 and shown.stdout.strip(), shown.stderr
    assert seen["command"][1:4] == ["-m", "rlvr.team.remote", "--version"]
    assert "SSH_AUTH_SOCK" not in seen["env"]
    strict_ssh()
    info = SSHFileSystem._prepare_credentials(object.__new__(SSHFileSystem), host="h")
    assert info["agent_path"] is None and info["agent_forwarding"] is False
    assert info["known_hosts"] == known_hosts()


def test_a_damaged_object_on_the_remote_never_lands(ssh_home, tmp_path):
    """The remote's `verify`: each pulled object is hashed again, so one changed on the server
    (damaged, or forged without its md5) never lands in the clone: DVC drops it from the cache,
    and the pull (--allow-missing) leaves that output to `dvc repro` to rebuild."""
    repo = _repo(tmp_path / "repo", ssh_home, files=3)
    push(repo)
    target = repo / "models" / "final" / "part-0001.bin"
    md5 = hashlib.md5(target.read_bytes()).hexdigest()
    stored = ssh_home.storage / "files" / "md5" / md5[:2] / md5[2:]
    stored.write_bytes(b"forged" + stored.read_bytes()[6:])
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    (clone / ".dvc" / "config.local").write_text((repo / ".dvc" / "config.local").read_text())
    pull(clone)
    assert dvc(clone, "config", "remote.team.verify").strip() == "true"
    pulled = _digests(clone / "models" / "final") if (clone / "models" / "final").exists() else {}
    assert "part-0001.bin" not in pulled and not list(
        clone.glob(f".dvc/cache/files/md5/{md5[:2]}/*")
    )
