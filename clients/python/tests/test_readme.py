"""The README's examples run as written against a real server."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any, Dict, List

import pytest

from conftest import Server

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks() -> List[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_quick_start(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    lex = server.root / "src" / "parser" / "lex.rs"
    lex.parent.mkdir(parents=True)
    lex.write_text("fn old() {}\n")
    monkeypatch.chdir(server.root)  # Session.connect() finds the discovery file here
    namespace: Dict[str, Any] = {}
    exec(compile(blocks()[0], "README.md quick start", "exec"), namespace)
    assert lex.read_text() == "fn new() {}\n"
    assert namespace["waves"] == [["parser"], ["docs"]]
    assert namespace["session"].closed


def test_asyncio_example(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    (async_block,) = [b for b in blocks() if "AsyncSession" in b]
    monkeypatch.chdir(server.root)
    namespace: Dict[str, Any] = {}
    exec(compile(async_block, "README.md asyncio", "exec"), namespace)
    asyncio.run(namespace["main"]())
    assert (server.root / "src" / "a.py").read_text() == "print('hi')\n"
