"""Operations on the board as a whole: who am I, projects, the event log, tokens, and
the supervisor's status and doctor reports.

Each call imports the board lazily; this module stays cheap to load.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from laneboard.errors import LaneboardError, bad_input
from laneboard.ops import schemas as R
from laneboard.ops.invoke import Call
from laneboard.ops.render import event_line, pairs, table
from laneboard.ops.spec import Caller, Op, Params, Route, p

PROJECT = p("project", "project", "project key, name or id", required=True, http="path",
            metavar="PROJECT")  # fmt: skip


def whoami(c: Call, _a: Params) -> Any:
    return c.actor.to_dict()


def whoami_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    scope = f" scoped to card {d['card_id']}" if d.get("card_id") else ""
    return f"{d['name']} ({d['kind']}){scope}"


WHOAMI = Op(
    "whoami",
    ("whoami",),
    "show who you act as",
    "The identity your calls are made under: the local person (LANEBOARD_USER), or the "
    "actor of the token in LANEBOARD_TOKEN / LANEBOARD_TOKEN_FILE.",
    ("lb whoami", "lb whoami --json"),
    (),
    Caller.CARD_READER,
    "caller",
    whoami,
    whoami_text,
    R.ACTOR,
    read_only=True,
    routes=(Route("GET", "/me", "whoami", tag="auth"),),
    tool="whoami",
)


# -- projects ----------------------------------------------------------------------------
def project_list(c: Call, _a: Params) -> Any:
    from laneboard.board import access

    return [x.to_dict() for x in access.projects(c.board, c.actor)]


def projects_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    rows = [
        [x["key"], x["name"], x["path"] or "-", x["base_ref"] or "-", x.get("remote") or "-"]
        for x in d
    ]
    return table(rows, ["KEY", "NAME", "PATH", "BASE", "REMOTE"])


PROJECT_LIST = Op(
    "project.list",
    ("project", "list"),
    "list projects",
    "Every project on the board with its directory, the git ref its lanes start from and "
    "its shared git remote.",
    ("lb project list",),
    (),
    Caller.CARD_READER,
    "board",
    project_list,
    projects_text,
    R.array(R.PROJECT),
    read_only=True,
    routes=(Route("GET", "/projects", "listProjects"),),
    tool="list_projects",
    tool_key="projects",
)


def project_get(c: Call, a: Params) -> Any:
    from laneboard.board import access

    return access.project(c.board, c.actor, a["project"]).to_dict()


PROJECT_GET = Op(
    "project.get",
    ("project", "get"),
    "show one project",
    "One project by key, name or id: its directory, the git ref its lanes start from and "
    "its shared git remote.",
    ("lb project get WEB",),
    (PROJECT,),
    Caller.CARD_READER,
    "board",
    project_get,
    lambda d, _a, _n: projects_text([d], _a, _n),
    R.PROJECT,
    read_only=True,
    routes=(Route("GET", "/projects/{project}", "getProject"),),
    tool="get_project",
)


def _remote_arg(remote: str | None) -> str | None:
    if remote is not None and os.path.isdir(remote):
        return os.path.abspath(remote)  # a bare repository's path: the same from anywhere
    return remote


def project_add(c: Call, a: Params) -> Any:
    path = a.get("path")
    if path is not None and not os.path.isdir(path):
        raise bad_input(f"project path {path} is not a directory", "create it or fix --path")
    return c.board.add_project(
        c.actor, a["key"], a.get("name"), path, a.get("base_ref"),
        remote=_remote_arg(a.get("remote")),
    ).to_dict()  # fmt: skip


PROJECT_ADD = Op(
    "project.add",
    ("project", "add"),
    "add a project",
    "Add a project: a short key used in card references (WEB-12), and the directory of its "
    "git checkout, where lanes are made; or, for several machines, a shared git remote "
    "(--remote) that each machine clones into its state directory and lands on. A remote is "
    "asked for its branches first (git ls-remote, without prompting): one this machine "
    "cannot reach is refused with REMOTE_UNREACHABLE, one without the base branch with "
    "WORKSPACE_BASE_UNRESOLVED, a URL with a password in it with BAD_INPUT (every reader of "
    "the board would see it), and nothing is added.",
    ("lb project add WEB --path ~/src/web", "lb project add API --name Api --base-ref develop",
     "lb project add SRV --remote git@git.example.com:team/srv.git"),
    (
        p("key", "text", "short upper-case key used in card references, e.g. WEB",
          required=True, metavar="KEY", schema={"maxLength": 10, "minLength": 1}),
        p("name", "text", "display name (default: the key)", flag="--name",
          schema={"maxLength": 200}),
        p("path", "text", "the project's directory (a git checkout for lanes)", flag="--path",
          local_path=True, schema={"maxLength": 4000}),
        p("base_ref", "text", "the git ref lanes start from (default: the current branch)",
          flag="--base-ref", schema={"maxLength": 200}),
        p("remote", "text", "a shared git remote (URL or bare repository path): each machine "
          "clones it, pushes lane branches to it and lands on its base branch",
          flag="--remote", schema={"maxLength": 4000}),
    ),
    Caller.PERSON,
    "board",
    project_add,
    lambda d, _a, _n: f"project {d['key']} added ("
    + (f"remote {d['remote']}" if d.get("remote") else d["path"] or "no directory") + ")",
    R.PROJECT,
    routes=(Route("POST", "/projects", "addProject", 201),),
    tool="add_project",
    what="add projects",
)  # fmt: skip


def project_edit(c: Call, a: Params) -> Any:
    remote, clear = a.get("remote"), bool(a.get("no_remote"))
    if (remote is None) == (not clear):
        raise bad_input(
            "give either --remote URL or --no-remote" if not clear
            else "--remote and --no-remote together",
            "set the remote with --remote URL, or clear it with --no-remote",
        )  # fmt: skip
    return c.board.edit_project(c.actor, a["project"], remote=_remote_arg(remote)).to_dict()


PROJECT_EDIT = Op(
    "project.edit",
    ("project", "edit"),
    "change a project's shared git remote",
    "Set or switch the project's shared git remote (--remote URL, checked like project add's), "
    "or clear it (--no-remote: lanes are made in the project's directory again). Refused "
    "with CONFLICT while a card of the project has work not landed (claimed, delivered, or "
    "with an active lane): its lane and branch would be left behind on the old remote. "
    "Naming the current remote changes nothing.",
    ("lb project edit SRV --remote git@git.example.com:team/srv.git",
     "lb project edit SRV --no-remote"),
    (
        PROJECT,
        p("remote", "text", "the new shared git remote (URL or bare repository path)",
          flag="--remote", schema={"maxLength": 4000}),
        p("no_remote", "bool", "clear the remote: lanes in the project's directory again",
          flag="--no-remote"),
    ),
    Caller.PERSON,
    "board",
    project_edit,
    lambda d, _a, _n: f"project {d['key']} edited ("
    + (f"remote {d['remote']}" if d.get("remote") else "no remote") + ")",
    R.PROJECT,
    destructive=True,
    routes=(Route("PATCH", "/projects/{project}", "editProject"),),
    tool="edit_project",
    what="edit projects",
)  # fmt: skip


def project_config(c: Call, a: Params) -> Any:
    changes: dict[str, Any] = {}
    for item in a.get("set") or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise bad_input(f"--set {item!r} is not NAME=VALUE", "e.g. --set workspace=shared")
        name = name.strip()
        if name == "review_gate":
            changes.setdefault(name, []).append(value)
        else:
            changes[name] = value
    unset = a.get("unset") or []
    if changes or unset:
        return c.board.set_project_config(c.actor, a["project"], changes, unset)
    from laneboard.board import access

    return access.project_config(c.board, c.actor, a["project"])


PROJECT_CONFIG = Op(
    "project.config",
    ("project", "config"),
    "show or change a project's settings",
    "Without --set or --unset, print the project's settings; otherwise change them and "
    "print the result. Settings: workspace (lanes or shared), review_gate (a command; "
    "repeat to add), check_timeout (seconds), base_ref.",
    ("lb project config WEB", "lb project config WEB --set workspace=shared --unset base_ref"),
    (
        PROJECT,
        p("set", "texts", "NAME=VALUE to set (repeatable)", flag="--set", metavar="NAME=VALUE",
          schema={"items": {"type": "string", "minLength": 1, "maxLength": 5000}}),
        p("unset", "texts", "a setting to remove (repeatable)", flag="--unset", metavar="NAME"),
    ),
    Caller.PERSON,
    "board",
    project_config,
    lambda d, _a, _n: pairs(d) or "(defaults)",
    R.PROJECT_CONFIG,
    destructive=True,
    routes=(Route("POST", "/projects/{project}/config", "configureProject"),),
    tool="project_config",
    what="configure projects",
)  # fmt: skip


# -- the event log ---------------------------------------------------------------------------
def events(c: Call, a: Params) -> Any:
    from laneboard.board import access

    b, me = c.board, c.actor
    card, project, run = a.get("card"), a.get("project"), a.get("run")
    after = a.get("after")
    if after is not None:
        got, cursor = access.events_after(
            b, me, after, card=card, project=project, run_id=run, limit=a["limit"]
        )
    else:  # what has committed, newest last; a follower resumes from the head read first
        cursor = b.event_head()
        last = a["last"]
        if project is not None or run is not None:
            got = access.events(b, me, 0, card=card, project=project, run_id=run, limit=10**9)
        else:
            got = access.last_events(b, me, max(last, 1), card=card)
        got = got[-last:] if last else []
    c.notes["cursor"] = cursor  # where a follower resumes: it skips nothing after these
    return [e.to_dict() for e in got]


def follow_events(runner: Any, op: Op, params: Params, cli: Params, as_json: bool) -> int:
    """``lb events tail``: print the events; with --follow, poll for new ones from the
    cursor (never skipping one). Without --follow, --json prints one JSON array; with it,
    one JSON object per line."""
    import json
    import sys
    import time

    follow, limit = bool(cli.get("follow")), int(cli.get("max_events") or 0)
    interval = float(cli.get("interval") or 0.5)
    if interval <= 0 or limit < 0:
        raise bad_input("--interval and --max-events must be positive", "e.g. --interval 0.5")
    data, notes = runner.call(op, params)
    if not follow:
        data = data[:limit] if limit else data
        if as_json:
            sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        elif data:
            sys.stdout.write("\n".join(event_line(e) for e in data) + "\n")
        return 0
    count = 0
    shown = {e["id"] for e in data}  # the first reads after the head may repeat some of them
    away = Away(interval)
    while True:
        for e in data:
            sys.stdout.write((json.dumps(e, sort_keys=True) if as_json else event_line(e)) + "\n")
            count += 1
            if limit and count >= limit:
                sys.stdout.flush()
                return 0
        sys.stdout.flush()
        time.sleep(away.wait())
        after = {k: v for k, v in params.items() if k not in ("last", "after")}
        cursor = str(notes.get("cursor", "0"))
        try:
            data, notes = runner.call(op, {**after, "after": cursor})
        except LaneboardError as err:
            if err.code != "STORE_UNAVAILABLE":
                raise
            away.failed(err)
            data, notes = [], {**notes, "cursor": cursor}  # the same cursor, tried again
            continue
        away.back()
        data = [e for e in data if e["id"] not in shown]


class Away:
    """A follower's pace: its interval, and while the board is out of reach (the database
    or ``lb serve`` restarting) a wait doubling up to ``AWAY_MAX_S``, said once on
    stderr when it begins and once when the board answers again."""

    def __init__(self, interval: float) -> None:
        self.interval, self.next = interval, interval

    def wait(self) -> float:
        return self.next

    def failed(self, err: LaneboardError) -> None:
        import sys

        if self.next == self.interval:
            sys.stderr.write(f"the board is out of reach ({err.message}); following again "
                             "when it answers, from the same cursor\n")  # fmt: skip
        self.next = min(max(self.next * 2, self.interval), AWAY_MAX_S)

    def back(self) -> None:
        import sys

        if self.next != self.interval:
            sys.stderr.write("the board is back: following\n")
            self.next = self.interval


AWAY_MAX_S = 30.0


EVENTS = Op(
    "events.tail",
    ("events", "tail"),
    "print recent events, and follow new ones",
    "The event log: the most recent -n events, or the events after a cursor (--after: an "
    "event's cursor field, or an event id). "
    "--follow keeps printing new events as they are written (with --json, one JSON "
    "object per line). An agent credential sees the events of the cards it may read.",
    ("lb events tail -n 50", "lb events tail --card WEB-12 --follow", "lb events tail --after 120 --json"),
    (
        p("last", "int", "how many recent events, without --after", flag="-n", http="query",
          default=20, schema={"minimum": 0, "maximum": 10_000}),
        p("after", "text", "start after this cursor (an event's cursor field, or an id)",
          flag="--after", metavar="CURSOR", http="query",
          schema={"pattern": "^[0-9]{1,19}([.][0-9]{1,19})?$", "maxLength": 40}),
        p("card", "ref", "only this card", flag="--card", http="query"),
        p("project", "project", "only this project", flag="--project", http="query"),
        p("run", "int", "only this run", flag="--run", http="query", schema={"minimum": 1}),
        p("limit", "int", "with --after: at most this many", flag="--limit", http="query",
          default=1000, schema={"minimum": 1, "maximum": 1000}),
        p("follow", "bool", "keep printing new events", flag="--follow", short="-f",
          cli_only=True),
        p("interval", "float", "seconds between polls with --follow", flag="--interval",
          default=0.5, cli_only=True),
        p("max_events", "int", "stop after printing this many (0: never)", flag="--max-events",
          default=0, cli_only=True),
    ),
    Caller.CARD_READER,
    "card",
    events,
    lambda d, _a, _n: "\n".join(event_line(e) for e in d),
    R.array(R.EVENT),
    read_only=True,
    routes=(Route("GET", "/events", "events", tag="events"),),
    tool="events",
    tool_key="events",
    cli_run=follow_events,
)  # fmt: skip


# -- tokens ----------------------------------------------------------------------------------
def token_create(c: Call, a: Params) -> Any:
    from laneboard.board.tokens import Tokens

    kind, card = a["kind"], a.get("card")
    if card and kind != "agent":
        raise bad_input("only agent tokens take a card scope", "drop --card or use --kind agent")
    card_id = c.board.get(card).id if card else None
    seconds = a.get("expires_in_s")
    expires = c.clock.now_ms() + seconds * 1000 if seconds else None
    token, info = Tokens(c.store).create(
        c.actor, a["name"], kind, card_id=card_id, epoch=a.get("epoch"), expires_at=expires
    )
    return {**info.to_dict(), "token": token}


TOKEN_CREATE = Op(
    "token.create",
    ("token", "create"),
    "create a token",
    "A credential for the HTTP API, MCP or a remote lb. An agent token may be scoped to a "
    "card (it reads that card and its dependencies, and writes only it) and to a claim "
    "epoch. The plaintext is shown once.",
    ("lb token create --name ci --kind human --expires 7d",
     "lb token create --name w1 --card WEB-12 --epoch 3"),
    (
        p("name", "text", "who or what uses it", flag="--name", required=True,
          schema={"maxLength": 200, "minLength": 1}),
        p("kind", "text", "agent or human", flag="--kind", default="agent",
          choices=("agent", "human")),
        p("card", "ref", "scope an agent token to this card (and its dependencies)",
          flag="--card"),
        p("epoch", "int", "the claim epoch the agent's writes must carry", flag="--epoch",
          schema={"minimum": 0}),
        p("expires_in_s", "int", "lifetime like 30m, 12h or 7d (default: never)",
          flag="--expires", metavar="LIFETIME", cli_type="lifetime",
          schema={"minimum": 1, "maximum": 10 * 365 * 86400}),
    ),
    Caller.PERSON,
    "board",
    token_create,
    lambda d, _a, _n: f"{d['token']}\n(token {d['id']} for {d['name']}; shown once — store it now)",
    R.TOKEN_CREATED,
    routes=(Route("POST", "/tokens", "createToken", 201, tag="auth"),),
    tool="create_token",
    what="create tokens",
)  # fmt: skip


def token_list(c: Call, _a: Params) -> Any:
    from laneboard.board.tokens import Tokens

    return [t.to_dict() for t in Tokens(c.store).list(c.actor)]


def tokens_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    rows = [
        [str(t["id"]), t["name"], t["kind"], str(t["card_id"] or "-"), t["expires_at"] or "-",
         "revoked" if t["revoked_at"] else "active"]
        for t in d
    ]  # fmt: skip
    return table(rows, ["ID", "NAME", "KIND", "CARD", "EXPIRES", "STATE"])


TOKEN_LIST = Op(
    "token.list",
    ("token", "list"),
    "list tokens",
    "Every token's id, name, kind, card scope, expiry and state; never the plaintext.",
    ("lb token list",),
    (),
    Caller.PERSON,
    "board",
    token_list,
    tokens_text,
    R.array(R.TOKEN_INFO),
    read_only=True,
    routes=(Route("GET", "/tokens", "listTokens", tag="auth"),),
    tool="list_tokens",
    tool_key="tokens",
    what="list tokens",
)


def token_revoke(c: Call, a: Params) -> Any:
    from laneboard.board.tokens import Tokens

    return Tokens(c.store).revoke(c.actor, a["token_id"]).to_dict()


TOKEN_REVOKE = Op(
    "token.revoke",
    ("token", "revoke"),
    "revoke a token",
    "A revoked token is refused (UNAUTHORIZED) from then on, on every surface.",
    ("lb token revoke 7",),
    (p("token_id", "int", "the token's id (lb token list)", required=True, http="path",
       metavar="ID", schema={"minimum": 1}),),
    Caller.PERSON,
    "board",
    token_revoke,
    lambda d, _a, _n: f"token {d['id']} ({d['name']}) revoked",
    R.TOKEN_INFO,
    destructive=True,
    routes=(Route("DELETE", "/tokens/{token_id}", "revokeToken", tag="auth"),),
    tool="revoke_token",
    what="revoke tokens",
)  # fmt: skip


# -- the supervisor's reports ------------------------------------------------------------------
def status(c: Call, _a: Params) -> Any:
    from laneboard.config import load_supervisor_config
    from laneboard.supervisor.status import status_report

    return status_report(c.store, c.clock, load_supervisor_config())


def status_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    from laneboard.supervisor.reports_text import render_status

    return render_status(d)


STATUS = Op(
    "status",
    ("status",),
    "show the supervisor, pool, queue and sessions",
    "Whether this machine's supervisor is running, stopped, wedged or unresponsive; its "
    "pool, the dispatch queue, live sessions, deferrals and the next tick.",
    ("lb status", "lb status --json"),
    (),
    Caller.PERSON,
    "board",
    status,
    status_text,
    R.REPORT_DOC,
    read_only=True,
    routes=(Route("GET", "/status", "status", tag="ops"),),
    tool="status",
    what="read the supervisor status",
)


def doctor(c: Call, _a: Params) -> Any:
    from laneboard.config import load_supervisor_config
    from laneboard.supervisor.doctor import doctor_report

    return doctor_report(c.store, c.clock, load_supervisor_config())


def doctor_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    from laneboard.supervisor.reports_text import render_doctor

    return render_doctor(d)


DOCTOR = Op(
    "doctor",
    ("doctor",),
    "show the read-only health report",
    "One inspection of the supervisor, the queue and the board that changes nothing. "
    "attention is true when something needs a person; the reasons say what.",
    ("lb doctor", "lb doctor --json"),
    (),
    Caller.PERSON,
    "board",
    doctor,
    doctor_text,
    R.DOCTOR,
    read_only=True,
    routes=(Route("GET", "/doctor", "doctor", tag="ops"),),
    tool="doctor",
    what="read the doctor report",
)

OPS = (
    WHOAMI,
    PROJECT_LIST,
    PROJECT_GET,
    PROJECT_ADD,
    PROJECT_EDIT,
    PROJECT_CONFIG,
    EVENTS,
    TOKEN_CREATE,
    TOKEN_LIST,
    TOKEN_REVOKE,
    STATUS,
    DOCTOR,
)
