"""Stand-ins for systemctl, loginctl, launchctl and crontab that record their argv.

Each is a small Python program written into the test's ``LANEBOARD_SERVICE_TOOLS``
directory. They keep their state in JSON files beside them, answer the few queries
laneboard makes, and append every call to ``calls.jsonl``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

COMMON = """
import json, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
def load(name, default):
    try:
        with open(os.path.join(HERE, name)) as fh:
            return json.load(fh)
    except FileNotFoundError:
        return default
def save(name, data):
    with open(os.path.join(HERE, name), "w") as fh:
        json.dump(data, fh)
with open(os.path.join(HERE, "calls.jsonl"), "a") as fh:
    fh.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
args = sys.argv[1:]
"""

SYSTEMCTL = """
if os.path.exists(os.path.join(HERE, "no-bus")):
    sys.stderr.write("Failed to connect to bus: No medium found\\n")
    sys.exit(1)
assert args[0] == "--user", args
args = args[1:]
units = load("systemd.json", {})
def unit(name):
    return units.setdefault(name, {"enabled": False, "active": False, "pid": 0, "exit": None})
verb = args[0]
if verb == "show-environment":
    print("HOME=/home/x")
elif verb == "show":
    u = unit(args[1])
    print("LoadState=loaded")
    print("UnitFileState=" + ("enabled" if u["enabled"] else "disabled"))
    print("ActiveState=" + ("active" if u["active"] else "inactive"))
    print("SubState=" + ("running" if u["active"] else "dead"))
    print("MainPID=" + str(u["pid"] if u["active"] else 0))
    print("ExecMainStatus=" + str(u["exit"] or 0))
    print("ExecMainExitTimestamp=" + ("Thu 2026-01-01 10:00:00 UTC" if u["exit"] is not None else ""))
    print("Result=success")
elif verb == "enable":
    unit(args[-1])["enabled"] = True
elif verb == "start":
    u = unit(args[-1]); u["active"] = True; u["pid"] = load("next_pid", 4242)
elif verb == "restart":
    u = unit(args[-1]); u["active"] = True; u["pid"] = u["pid"] + 1; u["exit"] = 0
elif verb == "disable":
    u = unit(args[-1]); u["enabled"] = False
    if "--now" in args:
        u["active"] = False; u["exit"] = 0
elif verb == "daemon-reload":
    pass
else:
    sys.exit(2)
save("systemd.json", units)
"""

LOGINCTL = """
print(load("linger.json", "no"))
"""

LAUNCHCTL = """
jobs = load("launchd.json", {})
verb = args[0]
if verb == "print":
    label = args[1].split("/")[-1]
    if label not in jobs:
        sys.stderr.write("Could not find service \\"%s\\" in domain for port\\n" % label)
        sys.exit(113)
    print(args[1] + " = {")
    print("\\tstate = running")
    print("\\tpid = %d" % jobs[label]["pid"])
    print("\\tlast exit code = 0")
    print("\\targuments = {")
    print("\\t\\tstate = nested")
    print("\\t}")
    print("}")
elif verb == "bootstrap":
    import plistlib
    with open(args[2], "rb") as fh:
        label = plistlib.load(fh)["Label"]
    if label in jobs:
        sys.stderr.write("Bootstrap failed: 37: Operation already in progress\\n")
        sys.exit(37)
    jobs[label] = {"pid": 777 + len(jobs)}
elif verb == "bootout":
    label = args[1].split("/")[-1]
    if jobs.pop(label, None) is None:
        sys.stderr.write("Boot-out failed: 3: No such process\\n")
        sys.exit(3)
else:
    sys.exit(2)
save("launchd.json", jobs)
"""

CRONTAB = """
path = os.path.join(HERE, "crontab.txt")
if os.path.exists(os.path.join(HERE, "cron-denied")):
    sys.stderr.write("You (tester) are not allowed to use this program (crontab)\\n")
    sys.exit(1)
if args == ["-l"]:
    if not os.path.exists(path):
        sys.stderr.write("no crontab for tester\\n")
        sys.exit(1)
    sys.stdout.write(open(path).read())
elif args == ["-"]:
    with open(path, "w") as fh:
        fh.write(sys.stdin.read())
else:
    sys.exit(2)
"""

PROGRAMS = {
    "systemctl": SYSTEMCTL,
    "loginctl": LOGINCTL,
    "launchctl": LAUNCHCTL,
    "crontab": CRONTAB,
}


def install(tools: Path, *names: str) -> None:
    """Write the named fakes (all of them by default) into ``tools``."""
    tools.mkdir(parents=True, exist_ok=True)
    for name in names or tuple(PROGRAMS):
        path = tools / name
        path.write_text(f"#!{sys.executable}\n{COMMON}\n{PROGRAMS[name]}")
        path.chmod(0o755)


def calls(tools: Path, name: str | None = None) -> list[list[str]]:
    path = tools / "calls.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    return [r[1:] for r in rows if name is None or r[0] == name]


def mutating(tools: Path, name: str) -> list[list[str]]:
    """Calls that change state (not the read-only queries)."""
    reads = {"show", "show-environment", "print", "show-user", "-l"}
    out = []
    for c in calls(tools, name):
        words = [w for w in c if w != "--user"]
        if words and words[0] not in reads:
            out.append(c)
    return out


def state(tools: Path, name: str) -> Any:
    path = tools / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}
