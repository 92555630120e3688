"""The README's install line gives a working ``lb serve`` and ``lb watch``: it names the
extras whose libraries those commands import, and each command without its libraries
says which extra to install."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_install_line_names_the_extras() -> None:
    readme = (ROOT / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("pip install"))
    extras = re.search(r"\.\[([a-z,]+)\]", line)
    assert extras is not None, line
    named = set(extras.group(1).split(","))
    assert {"server", "watch"} <= named
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {"server": {"starlette", "uvicorn", "jinja2", "pygments", "mcp"}, "watch": {"rich"}}
    for extra, libs in wanted.items():
        declared = {
            re.split(r"[<>=\[ ]", d, maxsplit=1)[0].lower()
            for d in project["optional-dependencies"][extra]
        }
        assert libs <= declared, (extra, declared)


def test_each_command_names_its_extra_when_missing(tmp_path: Path) -> None:
    shims = tmp_path / "shims"
    for lib in ("pygments", "rich"):
        (shims / lib).mkdir(parents=True)
        (shims / lib / "__init__.py").write_text(f"raise ImportError('no {lib}', name='{lib}')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env["PYTHONPATH"] = os.pathsep.join([str(shims), env.get("PYTHONPATH", "")])
    db = f"sqlite:///{tmp_path / 'board.db'}"
    lb = [sys.executable, "-m", "laneboard.cli.main", "--db", db]
    subprocess.run([*lb, "init"], env=env, check=True, capture_output=True)
    serve = subprocess.run(
        [*lb, "serve", "--port", "0"], env=env, capture_output=True, text=True, timeout=60
    )
    assert serve.returncode != 0 and "pip install 'laneboard[server]'" in serve.stderr
    assert "pygments" in serve.stderr
    watch = subprocess.run(
        [*lb, "watch", "--once"], env=env, capture_output=True, text=True, timeout=60
    )
    assert watch.returncode != 0 and "pip install 'laneboard[watch]'" in watch.stderr
