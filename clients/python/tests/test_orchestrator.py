"""examples/orchestrator.py: 0 lost updates through writ, some without."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

from conftest import DEADLINE, Server

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "orchestrator.py"


def run_example(*args: str) -> Dict[str, Any]:
    cmd: List[str] = [sys.executable, str(EXAMPLE), "--json", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE * 4)
    assert done.returncode == 0, done.stderr
    report: Dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_through_writ_no_update_is_lost(server: Server) -> None:
    report = run_example("--url", server.url, "--token", server.token, "--workers", "4", "--edits", "12")
    assert report["mode"] == "writ"
    assert report["updates_made"] == 48
    assert report["lost_updates"] == 0
    assert report["updates_present"] == 48
    # The workers' grants were checked first: one wave of workers, then the summary.
    assert report["plan_waves"] == [["w0", "w1", "w2", "w3"], ["summary"]]
    # Contention is real: a worker's write to the shared file was refused as
    # stale (another wrote between its read and its write) and redone; a busy
    # file is waited for, not refused.
    assert sum(report["refusals"].values()) > 0, report
    assert set(report["refusals"]) <= {"Busy", "Stale", "NotRead"}


def test_without_writ_updates_are_lost(tmp_path: Path) -> None:
    report = run_example("--without-writ", "--root", str(tmp_path), "--workers", "4", "--edits", "12")
    assert report["mode"] == "direct"
    assert report["updates_made"] == 48
    assert report["lost_updates"] > 0, report
    assert report["refusals"] == {}
