"""Fixtures of the team tests (the shared remote, the registry, the nightly): real servers on
127.0.0.1, one per test session. Kept out of tests/conftest.py, which the reward gate's stage runs
(and so depends on)."""

import pytest


@pytest.fixture(scope="session")
def ssh_server(tmp_path_factory):
    """One real sshd on 127.0.0.1 for the session's remote tests (tests/team/servers.py). Without
    sshd installed the tests skip, saying so (`need_sshd`, which every SSHServer calls first);
    .ci/run installs it and sets RLVR_REQUIRE_SERVERS, which turns that skip into a failure."""
    from tests.team.servers import SSHServer

    server = SSHServer(tmp_path_factory.mktemp("sshd")).start()
    yield server
    server.stop()


@pytest.fixture
def ssh_home(ssh_server, monkeypatch):
    """HOME pointing at a folder whose known_hosts trusts the session's sshd (for dvc-ssh)."""
    monkeypatch.setenv("HOME", str(ssh_server.home))
    return ssh_server


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """One real Prefect server (and database) on 127.0.0.1 for the session's deployment tests,
    with the process work pool rlvr-process; stopped, with whatever the tests started through it,
    at the end of the session."""
    from tests.team.servers import PrefectServer

    server = PrefectServer(tmp_path_factory.mktemp("prefect")).start()
    yield server
    server.stop()
