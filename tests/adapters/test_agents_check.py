"""``lb agents check`` with each pinned CLI present, missing from PATH, and configured to a
path that does not exist; role placement when a kind is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from agent_kit import CLI_BIN, KINDS, base_path, cli_path

from laneboard.agents.discovery import resolve_role_kind, unresolved_error
from laneboard.domain.roles import Role

VERSIONS = {"claude": "2.1.197", "codex": "0.171.0", "pi": "0.73.1"}


def lb(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def check_env(tmp_path: Path, path: str) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": path,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }


def pi_endpoint(env: dict[str, str], url: str, settings: str = "") -> None:
    """Pi configured to a provider ``mock`` at ``url``, with laneboard's kind settings."""
    pi_dir = Path(env["HOME"]) / ".pi" / "agent"
    pi_dir.mkdir(parents=True, exist_ok=True)
    (pi_dir / "models.json").write_text(
        json.dumps(
            {"providers": {"mock": {"baseUrl": url, "apiKey": "k", "models": [{"id": "m"}]}}}
        )
    )
    cfg = Path(env["XDG_CONFIG_HOME"]) / "laneboard"
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "config.toml").write_text(f'[supervisor.agent_kinds.pi]\nprovider = "mock"\n{settings}')


def test_check_says_not_logged_in_and_unreachable_instead_of_ok(tmp_path: Path) -> None:
    import socket

    env = check_env(tmp_path, f"{CLI_BIN}{os.pathsep}{base_path()}")
    # bound but never listening: connections are refused, and no other process (another
    # test worker's server) can take the port while the test runs
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    closed = held.getsockname()[1]
    try:
        pi_endpoint(env, f"http://127.0.0.1:{closed}/v1")
        out = lb(["agents", "check", "--no-handshake", "--json"], env, tmp_path)
        assert out.returncode == 0, out.stderr
        by_kind = {k["kind"]: k for k in json.loads(out.stdout)["kinds"]}
        assert by_kind["claude"]["login"]["logged_in"] is False
        assert "not logged in" in by_kind["claude"]["login"]["problem"]
        assert by_kind["pi"]["login"]["reachable"] is False
        assert json.loads(out.stdout)["available"] == []
        text = lb(["agents", "check", "--no-handshake"], env, tmp_path).stdout
        rows = {line.split()[0]: line for line in text.splitlines()[1:4]}
        assert "not logged in" in rows["claude"] and "not logged in" in rows["codex"]
        assert "unreachable" in rows["pi"] and f"127.0.0.1:{closed}" in rows["pi"]
        assert text.splitlines()[-2].startswith("sandbox: bwrap")
        assert text.splitlines()[-1].startswith("checks: in the sandbox")
    finally:
        held.close()


def test_check_reports_each_present_cli_with_version_and_handshake(tmp_path: Path) -> None:
    for kind in KINDS:
        cli_path(kind)
    env = check_env(tmp_path, f"{CLI_BIN}{os.pathsep}{base_path()}")
    env.update(ANTHROPIC_API_KEY="sk-ant-test", OPENAI_API_KEY="sk-test")
    out = lb(["agents", "check", "--json"], env, tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    by_kind = {k["kind"]: k for k in data["kinds"]}
    assert data["sandbox"]["ok"] is True and data["sandbox"]["backend"] == "bwrap"
    for kind in KINDS:
        entry = by_kind[kind]
        assert entry["found"] is True, entry
        assert entry["version"] == VERSIONS[kind]
        assert entry["handshake"] is True, entry
        assert entry["path"] == str(CLI_BIN / kind)
        assert entry["permissions"]["allow_all_tools"] is False
    assert data["available"] == list(KINDS)
    text = lb(["agents", "check", "--no-handshake"], env, tmp_path)
    assert text.returncode == 0
    assert "2.1.197" in text.stdout and "0.171.0" in text.stdout


def test_check_reports_missing_clis_from_path_and_a_configured_path_nowhere(tmp_path: Path) -> None:
    config = tmp_path / "config" / "laneboard"
    config.mkdir(parents=True)
    (config / "config.toml").write_text(
        "[supervisor.agent_kinds.codex]\n"
        f'binary = "{tmp_path / "nowhere" / "codex"}"\n'
        "[supervisor.agent_kinds.pi]\n"
        f'binary = "{CLI_BIN / "pi"}"\n'
    )
    env = check_env(tmp_path, base_path())  # PATH without the CLI directory
    env["OPENAI_API_KEY"] = "sk-test"  # pi is logged in
    out = lb(["agents", "check", "--json"], env, tmp_path)
    assert out.returncode == 0, out.stderr
    by_kind = {k["kind"]: k for k in json.loads(out.stdout)["kinds"]}
    assert by_kind["claude"]["found"] is False
    assert "not on PATH" in by_kind["claude"]["error"]
    assert by_kind["codex"]["found"] is False
    assert "nowhere/codex does not exist" in by_kind["codex"]["error"]
    assert by_kind["pi"]["found"] is True and by_kind["pi"]["handshake"] is True
    assert json.loads(out.stdout)["available"] == ["pi"]
    text = lb(["agents", "check", "--kind", "claude"], env, tmp_path)
    assert "claude  no" in text.stdout


def test_check_reports_pi_missing_from_path_and_claude_configured_nowhere(tmp_path: Path) -> None:
    config = tmp_path / "config" / "laneboard"
    config.mkdir(parents=True)
    nowhere = tmp_path / "nowhere" / "claude"
    (config / "config.toml").write_text(f'[supervisor.agent_kinds.claude]\nbinary = "{nowhere}"\n')
    # PATH has claude and codex but not pi: the configured claude path is not replaced by
    # the claude found on PATH
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for kind in ("claude", "codex"):
        (bin_dir / kind).symlink_to(cli_path(kind))
    env = check_env(tmp_path, f"{bin_dir}{os.pathsep}{base_path()}")
    env["OPENAI_API_KEY"] = "sk-test"  # codex is logged in
    out = lb(["agents", "check", "--json"], env, tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    by_kind = {k["kind"]: k for k in data["kinds"]}
    assert by_kind["claude"]["found"] is False and by_kind["claude"]["handshake"] is not True
    assert f"{nowhere} does not exist" in by_kind["claude"]["error"]
    assert by_kind["pi"]["found"] is False
    assert "not on PATH" in by_kind["pi"]["error"]
    assert by_kind["codex"]["found"] is True and by_kind["codex"]["handshake"] is True
    assert by_kind["codex"]["path"] == str(bin_dir / "codex")
    assert data["available"] == ["codex"]
    text = lb(["agents", "check", "--no-handshake"], env, tmp_path)
    rows = {line.split()[0]: line for line in text.stdout.splitlines()[1:] if line.strip()}
    assert rows["pi"].split()[1] == "no" and "not on PATH" in rows["pi"]
    assert rows["claude"].split()[1] == "no" and "does not exist" in rows["claude"]


def test_a_role_falls_back_to_another_kind_that_carries_it() -> None:
    role = Role(id="worker", agent="claude", extra={"agents": ["codex", "pi"]})
    assert resolve_role_kind(role, ["claude", "codex", "pi"]) == "claude"
    assert resolve_role_kind(role, ["pi", "codex"], ["claude", "pi", "codex"]) == "pi"
    assert resolve_role_kind(role, ["codex"]) == "codex"
    only_claude = Role(id="linus", agent="claude")
    assert resolve_role_kind(only_claude, ["codex", "pi"]) is None
    err = unresolved_error(only_claude, ["codex", "pi"])
    assert err.code == "AGENT_UNAVAILABLE" and "linus" in err.message
    anywhere = Role(id="helper", agent="any")
    assert resolve_role_kind(anywhere, ["pi", "codex"], ["codex", "pi"]) == "codex"
    assert resolve_role_kind(anywhere, []) is None


def test_an_endpoint_on_this_machines_loopback_is_out_of_the_sandboxs_reach(
    tmp_path: Path,
) -> None:
    """It answers here, but a sandbox with a network of its own cannot reach it: check
    says so and names ``host_ports`` with its port; with that set (or ``network =
    "host"``), it is reachable. Without slirp4netns agents share the host's network, where
    it is reachable as it is."""
    import shutil
    import socket

    env = check_env(tmp_path, f"{CLI_BIN}{os.pathsep}{base_path()}")
    isolated = shutil.which("slirp4netns", path=env["PATH"]) is not None
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"

    def pi_login() -> dict[str, Any]:
        out = lb(["agents", "check", "--no-handshake", "--json"], env, tmp_path)
        return {k["kind"]: k for k in json.loads(out.stdout)["kinds"]}["pi"]["login"]

    try:
        pi_endpoint(env, url)
        pi = pi_login()
        if isolated:
            assert pi["reachable"] is False
            assert "loopback" in pi["problem"] and f"host_ports = [{port}]" in pi["problem"]
        else:
            assert pi["reachable"] is True
        pi_endpoint(env, url, f"host_ports = [{port + 1}]\n")  # another port: still out
        assert pi_login()["reachable"] is not isolated
        for relayed in (f"host_ports = [{port}]\n", 'network = "host"\n'):
            pi_endpoint(env, url, relayed)
            pi = pi_login()
            assert pi["reachable"] is True and pi["problem"] is None, relayed
    finally:
        server.close()


def test_what_a_kinds_sandbox_reaches_decides_its_endpoints_reachability() -> None:
    """Checked without a server: a loopback endpoint is reached only through its relayed
    port; with ``network = "none"`` nothing else is; ``"host"`` and no sandbox reach all."""
    from laneboard.agents.checking import _contained, out_of_the_sandbox
    from laneboard.agents.credentials import Login

    def reach(endpoint: str, **settings: Any) -> tuple[bool | None, str | None]:
        got = out_of_the_sandbox(Login(True, "key", endpoint, True, None), "pi", settings)
        return got.reachable, got.problem

    assert reach("http://127.0.0.1:8080/v1") == (
        False,
        "endpoint http://127.0.0.1:8080/v1 is on this machine's loopback, which the agents' "
        "sandbox does not reach: set host_ports = [8080] in [supervisor.agent_kinds.pi] "
        "(docs/sandbox.md)",
    )
    assert reach("http://localhost/v1", host_ports=[80]) == (True, None)
    assert reach("https://[::1]/v1", host_ports=[80])[0] is False  # https: port 443
    assert reach("https://api.example.com/v1") == (True, None)
    assert reach("https://api.example.com/v1", network="none") == (
        False,
        'endpoint https://api.example.com/v1 is out of reach of a sandbox with network = "none": '
        "unset network in [supervisor.agent_kinds.pi] (docs/sandbox.md)",
    )
    assert reach("http://127.0.0.1:11434", network="none", host_ports=[11434]) == (True, None)
    assert reach("http://127.0.0.1:11434", network="host") == (True, None)
    assert _contained("bwrap", "isolated", {}) and _contained("bwrap", "profile", {})
    assert _contained("bwrap", "shared", {"network": "none"})
    assert not _contained("bwrap", "shared", {}) and not _contained("off", "isolated", {})
    assert not _contained("bwrap", "isolated", {"network": "host"})
