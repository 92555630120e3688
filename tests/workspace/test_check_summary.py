"""How checks run here, as ``lb status``, ``lb doctor`` and ``lb agents check`` say it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from laneboard.agents.check_sandbox import summary
from laneboard.agents.sandbox import SandboxStatus
from laneboard.config import SupervisorConfig, load_supervisor_config
from laneboard.errors import LaneboardError
from laneboard.supervisor.reports_text import boundary_lines

ISOLATED = SandboxStatus("auto", "bwrap", "/usr/bin/bwrap", True, slirp="/usr/bin/slirp4netns")
CFG = SupervisorConfig()


@pytest.mark.parametrize(
    ("config", "status", "network", "words"),
    [
        (CFG, ISOLATED, "own", "this machine's loopback out of reach"),
        (replace(CFG, check_network="none"), ISOLATED, "none", "no network"),
        (replace(CFG, check_network="host"), ISOLATED, "host", "loopback included"),
        (CFG, replace(ISOLATED, slirp=None), "shared", "install slirp4netns"),
        (
            replace(CFG, check_host_ports=(5432, 6379)),
            ISOLATED,
            "own",
            "loopback ports relayed: 5432, 6379",
        ),
    ],
    ids=["own", "none", "host", "no-slirp", "ports"],
)
def test_a_sandboxed_check_says_its_network(
    config: SupervisorConfig, status: SandboxStatus, network: str, words: str
) -> None:
    got = summary(config, status)
    assert got["sandboxed"] is True and got["network"] == network
    assert got["line"].startswith("in the sandbox; ") and words in got["line"]


def test_checks_outside_the_sandbox_say_so() -> None:
    off = summary(
        replace(CFG, sandbox="off", sandbox_reason="a VM"),
        SandboxStatus("off", None, None, True, reason="a VM"),
    )
    assert off["sandboxed"] is False and "run as you" in off["line"]
    none = summary(CFG, SandboxStatus("auto", "bwrap", None, False, "bwrap is not installed"))
    assert none["sandboxed"] is False and "refused" in none["line"]


def test_lb_status_prints_the_checks_line() -> None:
    b = {
        "sandbox": {"line": "bwrap (/usr/bin/bwrap)"},
        "checks": summary(CFG, ISOLATED),
        "agents": [],
        "unassigned_role": "worker",
    }
    lines = boundary_lines(b)
    assert lines[1].startswith("checks      in the sandbox; a network of their own")


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('check_network = "lan"', "bad value for supervisor.check_network: 'lan' is not one of"),
        ("check_host_ports = [70000]", "70000 is not a port number"),
    ],
)
def test_a_bad_check_setting_is_refused_with_its_line(tmp_path: Path, line: str, said: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f"[supervisor]\n{line}\n")
    with pytest.raises(LaneboardError) as err:
        load_supervisor_config(user_file=str(path))
    assert err.value.code == "CONFIG_INVALID"
    assert f"{path}:2:" in err.value.message and said in err.value.message
