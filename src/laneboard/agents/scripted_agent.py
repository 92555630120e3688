"""The scripted agent process (run by the ``scripted`` adapter; not a user command).

Protocol (JSON lines): on start it prints ``{"type": "ready"}`` (or an error when a
resumed session is unknown); for each ``{"type": "prompt"}`` it runs one turn and
prints ``event`` lines and one ``result``.

The script comes from the card's ``meta.script`` (read with ``lb card get``): a list of
steps, or an object whose ``r<N>`` keys hold the steps for delivery round N (``default``
otherwise). A step is an object with one action key:

``write``/``append`` (path, ``content``), ``run`` (shell command; ``check`` false to
ignore failure), ``lb`` (arguments to ``lb``), ``comment`` (text, ``kind``),
``heartbeat``, ``commit`` (message), ``report`` (body, ``evidence`` EXIT:COMMAND list),
``deliver`` (commit, report and move to in_review), ``verdict`` (APPROVE|REJECT with
``body`` and ``evidence``: a reviewer's report and delivery), ``ask`` (question; waits
for the answer with ``lb card wait``; ``record`` appends its result to a file),
``sleep`` (seconds), ``hang``, ``crash`` (exit code), ``say`` (final text). Any step may carry ``attempt`` (only on that attempt of
this card and round, counted across sessions) or ``turn`` (only on that turn of this
session). ``{card}`` and ``{round}`` are substituted in strings.

Run with ``--role director``, the agent plays the director lane: each prompt names its
card on a ``Card: REF`` line (the asking card, the card to route, or the accepted
producer of a triage row) and the steps come from that card's ``meta.director_script``
(none: the turn does nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from typing import Any

GIT = ["git", "-c", "core.hooksPath=/dev/null"]


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class StepFailed(Exception):
    pass


class Agent:
    def __init__(self, session: str, role: str) -> None:
        self.session = session
        self.role = role
        self.card = os.environ.get("LANEBOARD_CARD", "")
        self.root = os.environ.get("LANEBOARD_AGENT_STATE") or os.path.join(
            os.getcwd(), ".laneboard", "scripted"
        )
        self.turns = 0
        self.transcript: list[str] = []

    # -- persistence -----------------------------------------------------------------
    def _session_file(self) -> str:
        return os.path.join(self.root, "sessions", f"{self.session}.json")

    def load(self) -> bool:
        try:
            with open(self._session_file()) as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return False
        self.turns = int(data.get("turns", 0))
        self.transcript = list(data.get("transcript", []))
        return True

    def save(self) -> None:
        path = self._session_file()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(
                {
                    "turns": self.turns,
                    "transcript": self.transcript[-50:],
                    "card": self.card,
                    "role": self.role,
                },
                fh,
            )
        os.replace(tmp, path)

    def next_attempt(self, rnd: int) -> int:
        path = os.path.join(self.root, "attempts", f"{self.card}-r{rnd}-{self.role}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        n = 0
        if os.path.exists(path):
            with open(path) as fh:
                n = int(fh.read().strip() or 0)
        n += 1
        with open(path, "w") as fh:
            fh.write(str(n))
        return n

    # -- helpers ---------------------------------------------------------------------
    def lb(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "laneboard.cli.main", *args]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        emit(
            {
                "type": "event",
                "kind": "lb",
                "data": {
                    "args": list(args),
                    "exit": out.returncode,
                    "stderr": out.stderr.strip()[:500],
                },
            }
        )
        if check and out.returncode != 0:
            raise StepFailed(f"lb {' '.join(args)} failed: {out.stderr.strip()}")
        return out

    def card_data(self) -> dict[str, Any]:
        out = self.lb("card", "get", self.card, "--json")
        data: dict[str, Any] = json.loads(out.stdout)
        return data

    def commit(self, message: str) -> None:
        if not os.path.isdir(".git") and not os.path.isfile(".git"):
            return
        subprocess.run([*GIT, "add", "-A"], check=True, capture_output=True)
        status = subprocess.run([*GIT, "status", "--porcelain"], capture_output=True, text=True)
        if status.stdout.strip():
            subprocess.run(
                [
                    *GIT,
                    "-c",
                    "user.name=laneboard-scripted",
                    "-c",
                    "user.email=scripted@laneboard.invalid",
                    "commit",
                    "-q",
                    "-m",
                    message,
                ],
                check=True,
                capture_output=True,
            )

    # -- a turn ----------------------------------------------------------------------
    def turn(self, prompt: str) -> dict[str, Any]:
        self.turns += 1
        self.transcript.append(prompt[:2000])
        self.save()
        director = self.role == "director"
        if director:  # one director session serves many cards: the prompt names the row's card
            named = re.search(r"^Card: (\S+)$", prompt, re.MULTILINE)
            self.card = named.group(1) if named else self.card
        card = self.card_data()
        rnd = int(card["delivery_round"])
        attempt = self.next_attempt(rnd)
        if director:
            script = card.get("meta", {}).get("director_script", [])
        else:
            script = card.get("meta", {}).get("script", [{"deliver": "done"}])
        steps: list[dict[str, Any]]
        if isinstance(script, dict):
            steps = list(script.get(f"r{rnd}", script.get("default", [])) or [])
        else:
            steps = list(script or [])
        said = f"turn {self.turns} on {self.card} (round {rnd}, attempt {attempt})"
        for raw in steps:
            step = {k: self.sub(v, rnd) for k, v in raw.items()}
            if "attempt" in step and int(step["attempt"]) != attempt:
                continue
            if "turn" in step and int(step["turn"]) != self.turns:
                continue
            emit({"type": "event", "kind": "step", "data": step})
            said = self.run_step(step, said)
        return {
            "type": "result",
            "ok": True,
            "text": said,
            "usage": {"input_tokens": len(prompt) // 4, "output_tokens": len(said) // 4},
        }

    def sub(self, value: Any, rnd: int) -> Any:
        if isinstance(value, str):
            return value.replace("{card}", self.card).replace("{round}", str(rnd))
        if isinstance(value, list):
            return [self.sub(v, rnd) for v in value]
        return value

    def run_step(self, step: dict[str, Any], said: str) -> str:
        if "write" in step or "append" in step:
            path = step.get("write") or step["append"]
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "a" if "append" in step else "w") as fh:
                fh.write(step.get("content", ""))
        elif "run" in step:
            out = subprocess.run(step["run"], shell=True, capture_output=True, text=True)
            output = (out.stdout + out.stderr)[-1000:]
            emit({"type": "event", "kind": "command",
                  "data": {"command": step["run"], "exit_code": out.returncode, "output": output}})  # fmt: skip
            if step.get("check", True) and out.returncode != 0:
                raise StepFailed(f"{step['run']!r} exited {out.returncode}: {out.stderr[-300:]}")
        elif "lb" in step:
            args = step["lb"] if isinstance(step["lb"], list) else shlex.split(step["lb"])
            self.lb(*args, check=step.get("check", True))
        elif "comment" in step:
            self.lb(
                "card", "comment", self.card, step["comment"], "--kind", step.get("kind", "note")
            )
        elif "heartbeat" in step:
            self.lb("card", "heartbeat", self.card)
        elif "commit" in step:
            self.commit(step["commit"])
        elif "report" in step or "verdict" in step:
            body = step.get("report") or step.get("body", "")
            if "verdict" in step:
                body = f"VERDICT: {step['verdict']}\n{body}"
            args = ["card", "report", self.card, "--body", body]
            for ev in step.get("evidence", []):
                args += ["--evidence", ev]
            if "verdict" in step:
                args += ["--verdict", step["verdict"]]
            self.lb(*args)
            if "verdict" in step:
                self.lb("card", "move", self.card, "in_review")
        elif "deliver" in step:  # the report and the move to in_review, as one command
            self.commit(f"{self.card}: {step['deliver']}")
            args = ["card", "deliver", self.card, "--body", step["deliver"]]
            for ev in step.get("evidence", []):
                args += ["--evidence", ev]
            self.lb(*args)
        elif "ask" in step:
            out = self.lb("card", "ask", self.card, step["ask"], "--json")
            qid = str(json.loads(out.stdout)["id"])
            wait = self.lb(
                "card",
                "wait",
                self.card,
                "--question",
                qid,
                "--timeout",
                str(step.get("timeout", 110)),
                "--json",
                check=False,
            )
            result = json.loads(wait.stdout or "{}")
            emit({"type": "event", "kind": "answer", "data": result})
            if step.get("record"):  # keep the wait's result for whoever runs the script
                with open(step["record"], "a") as fh:
                    fh.write(json.dumps(result) + "\n")
            if result.get("outcome") == "answered":
                self.lb("card", "claim", self.card)
            elif step.get("stop_unless_answered", True):
                return f"stopped: question outcome {result.get('outcome')}"
        elif "sleep" in step:
            time.sleep(float(step["sleep"]))
        elif "hang" in step:
            while True:
                time.sleep(3600)
        elif "crash" in step:
            sys.stdout.flush()
            os._exit(int(step["crash"]))
        elif "say" in step:
            emit({"type": "event", "kind": "text", "data": {"text": str(step["say"])}})
            return str(step["say"])
        else:
            raise StepFailed(f"unknown step {sorted(step)}")
        return said


def main() -> int:
    ap = argparse.ArgumentParser(prog="scripted-agent")
    ap.add_argument("--session", required=True)
    ap.add_argument("--role", default="worker")
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    agent = Agent(args.session, args.role)
    if args.resume and not agent.load():
        emit({"type": "error", "code": "session_not_found", "session": args.session})
        return 4
    agent.save()
    emit({"type": "ready", "session": args.session})
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            emit({"type": "result", "ok": False, "error": "malformed prompt line"})
            continue
        if msg.get("type") != "prompt":
            continue
        try:
            emit(agent.turn(str(msg.get("text", ""))))
        except StepFailed as exc:
            emit({"type": "result", "ok": False, "error": str(exc), "text": ""})
        except Exception as exc:
            emit({"type": "result", "ok": False, "error": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
