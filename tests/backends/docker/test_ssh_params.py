"""Which known_hosts and which credentials an SSH host is reached with (pure: files only)."""

from __future__ import annotations

from pathlib import Path

from shipway.backends.docker.machines import addresses
from shipway.backends.docker.trust import ssh_params
from shipway.spec.model import DockerHost


def test_known_hosts_precedence_env_then_slot_then_ssh_config_then_default(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config"
    config.write_text(
        "Host web1\n  HostName 192.0.2.10\n  User deploy\n  Port 2222\n"
        f"  IdentityFile {tmp_path}/id_web1\n  UserKnownHostsFile {tmp_path}/from-config\n"
    )
    (host,) = addresses([DockerHost("ssh://web1")])
    base = {"SHIPWAY_SSH_CONFIG": str(config)}

    p = ssh_params(host, environ=base)
    assert (p.hostname, p.port, p.username) == ("192.0.2.10", 2222, "deploy")
    assert p.key_filenames == (f"{tmp_path}/id_web1",)
    assert p.known_hosts == tmp_path / "from-config"

    p = ssh_params(host, slot_known_hosts="kh/slot", base_dir=tmp_path, environ=base)
    assert p.known_hosts == tmp_path / "kh" / "slot"

    env = {**base, "SHIPWAY_KNOWN_HOSTS": str(tmp_path / "from-env")}
    p = ssh_params(host, slot_known_hosts="kh/slot", base_dir=tmp_path, environ=env)
    assert p.known_hosts == tmp_path / "from-env"


def test_the_url_wins_over_the_ssh_config_and_defaults_apply(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host web1\n  User deploy\n  Port 2222\n")
    (host,) = addresses([DockerHost("ssh://admin@web1:22")])
    p = ssh_params(host, environ={"SHIPWAY_SSH_CONFIG": str(config)})
    assert (p.hostname, p.port, p.username) == ("web1", 22, "admin")
    (bare,) = addresses([DockerHost("ssh://root@10.0.0.9")])
    p = ssh_params(bare, environ={"SHIPWAY_SSH_CONFIG": str(tmp_path / "missing")})
    assert (p.port, p.username, p.key_filenames) == (22, "root", ())
    assert p.known_hosts == Path("~/.ssh/known_hosts").expanduser()
