"""The seed's deterministic experiment as scripts for the scripted coordinator and
specialists: a producer and a consumer with owned paths, a question, a checkpoint and a
material contract change that gives the consumer a second revision. Specialists do not
commit: their sandbox keeps git read-only, and the runtime commits a lane's work."""

from __future__ import annotations

from typing import Any


def control(*args: str, check: bool = True) -> dict[str, Any]:
    step: dict[str, Any] = {"lb": ["orchestrate", "control", *args]}
    if not check:
        step["check"] = False
    return step


SHARED_CHECK = "test -f src/producer/api.txt && grep -q key src/consumer/use.txt"

COORDINATOR = [
    {"turn": 1, **control("assign", "--assignment", "producer", "--owner", "specialist-a",
                          "--brief", "write the record format to src/producer/api.txt",
                          "--path", "src/producer", "--check", "test -f src/producer/api.txt")},
    {"turn": 1, **control("assign", "--assignment", "consumer", "--owner", "specialist-b",
                          "--brief", "read the record's id field", "--path", "src/consumer",
                          "--dep", "producer")},
    {"turn": 3, **control("answer", "--assignment", "consumer",
                          "--note", "the field is called id; it may be renamed")},
    {"turn": 4, **control("revise", "--assignment", "consumer",
                          "--brief", "the field is now called key: read key",
                          "--check", SHARED_CHECK)},
    {"turn": 5, **control("complete")},
]  # fmt: skip

PRODUCER = {
    "r1": [
        control("accept", "--assignment", "producer", "--revision", "1"),
        {"write": "src/producer/api.txt", "content": "id key\n"},
        control("report", "--assignment", "producer", "--revision", "1", "--note", "format"),
    ]
}

CONSUMER = {
    "r1": [
        {"turn": 1, **control("accept", "--assignment", "consumer", "--revision", "1")},
        {"turn": 1, "write": "src/consumer/draft.txt", "content": "reads id\n"},
        {"turn": 1, "lb": ["card", "ask", "{card}", "which field holds the id?"]},
        {"turn": 2, **control("checkpoint", "--assignment", "consumer", "--revision", "1",
                              "--note", "draft reads the answered field")},
    ],
    "r2": [
        control("report", "--assignment", "consumer", "--revision", "1", check=False),
        control("accept", "--assignment", "consumer", "--revision", "2"),
        {"write": "src/consumer/use.txt", "content": "reads key\n"},
        control("report", "--assignment", "consumer", "--revision", "2", "--note", "reads key"),
    ],
}  # fmt: skip

SEED = {"coordinator": COORDINATOR, "producer": PRODUCER, "consumer": CONSUMER}
