"""One logfmt log file, rotated by size by the program itself."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from laneboard.store import redact_url


def _quote(value: Any) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="\n\t'):
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def redact(text: str) -> str:
    """Hide tokens, keys and credentials in URLs before they reach a log or an event."""
    import re

    text = re.sub(r"lbt_[A-Za-z0-9_\-]{8,}", "lbt_***", text)
    text = re.sub(r"(?i)(api[_-]?key|token|secret|password)=([^\s&]+)", r"\1=***", text)
    text = re.sub(r"\b(sk-[A-Za-z0-9]{6})[A-Za-z0-9_\-]+", r"\1***", text)
    return re.sub(r"[a-z][a-z0-9+.\-]*://[^\s/@]+@[^\s]+", lambda m: redact_url(m.group(0)), text)


class LogFile:
    def __init__(self, path: str, max_bytes: int = 10 * 1024 * 1024, keep: int = 5) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self._lock = threading.Lock()
        os.makedirs(os.path.dirname(path), exist_ok=True)

    def _rotate(self) -> None:
        for i in range(self.keep - 1, 0, -1):
            src = f"{self.path}.{i}"
            if os.path.exists(src):
                os.replace(src, f"{self.path}.{i + 1}")
        if os.path.exists(self.path):
            os.replace(self.path, f"{self.path}.1")
        extra = f"{self.path}.{self.keep + 1}"
        if os.path.exists(extra):
            os.remove(extra)

    def write(self, level: str, component: str, message: str, **fields: Any) -> None:
        parts = [
            f"time={time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime())}Z",
            f"level={level}",
            f"component={component}",
            f"msg={_quote(redact(message))}",
        ]
        fields.setdefault("actor_kind", "system")
        for k, v in fields.items():
            if v is not None:
                parts.append(f"{k}={_quote(redact(str(v)))}")
        line = " ".join(parts) + "\n"
        with self._lock:
            try:
                if os.path.getsize(self.path) + len(line) > self.max_bytes:
                    self._rotate()
            except FileNotFoundError:
                pass
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line)

    def info(self, component: str, message: str, **fields: Any) -> None:
        self.write("info", component, message, **fields)

    def warn(self, component: str, message: str, **fields: Any) -> None:
        self.write("warn", component, message, **fields)

    def error(self, component: str, message: str, **fields: Any) -> None:
        self.write("error", component, message, **fields)
