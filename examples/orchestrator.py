#!/usr/bin/env python3
"""A lead and N worker processes editing one repository through ``writ serve``.

The lead validates a plan, creates one actor per worker (each with its own
grant and token) and starts the workers as separate processes. Every worker
makes scripted edits -- no model involved -- the way a coding agent does:
read a file, think, write the whole file back. Half of the edits go to a file
every worker shares (``shared/CHANGES.md``); the rest to the worker's own
fenced folder. A file another worker is writing is waited for (``timeout=``);
refusals (``Stale``, ``NotRead``, ``Busy`` past the wait) are retried after a
re-read, as a model told "read it again" would.

At the end the lead counts lost updates from the final file contents, prints
the refusals by kind and the dump it took while the workers ran.

    writ serve &                       # in the repository
    python3 examples/orchestrator.py   # 0 lost updates
    python3 examples/orchestrator.py --without-writ   # the same workers, direct writes

``--without-writ`` runs the same workers writing the files directly; the
read-think-write races then lose updates.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

try:
    import writ_client
except ImportError:  # running from a clone without `pip install writ-sched`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "clients" / "python" / "src"))
    import writ_client

SHARED = "shared/CHANGES.md"
HEADER = "# Changes\n"


def own_file(worker: int) -> str:
    return f"src/w{worker}/log.md"


def expected_lines(worker: int, edits: int) -> List[str]:
    return [f"- w{worker} edit {k}" for k in range(edits)]


# -- the worker processes ---------------------------------------------------------


class Files:
    """What a worker edits with: through writ, or the files directly."""

    def read(self, path: str) -> str:
        raise NotImplementedError

    def write(self, path: str, content: str) -> None:
        raise NotImplementedError


class WritFiles(Files):
    def __init__(self, actor: writ_client.Actor) -> None:
        self.actor = actor

    def read(self, path: str) -> str:
        try:
            return self.actor.read(path, timeout=WAIT)
        except writ_client.NotFound:
            return ""

    def write(self, path: str, content: str) -> None:
        # The server waits for a file another worker is writing: no spinning on Busy.
        self.actor.write(path, content, timeout=WAIT)


class DirectFiles(Files):
    def __init__(self, base: Path) -> None:
        self.base = base

    def read(self, path: str) -> str:
        try:
            return (self.base / path).read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""

    def write(self, path: str, content: str) -> None:
        target = self.base / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")


# How long a file operation waits for a contested path before it is Busy.
WAIT = 10.0

RETRIED = (writ_client.Busy, writ_client.Stale, writ_client.NotRead)


def edit(files: Files, path: str, line: str, think: float, rng: random.Random, refusals: Counter[str]) -> None:
    """Read, think, append one line, write the whole file back; on a refusal read again."""
    for _attempt in range(1000):
        try:
            text = files.read(path) or HEADER  # a read waits for no one but a write in progress
            # The model's think time: another worker can write in between.
            time.sleep(rng.uniform(0, think))
            files.write(path, text + line + "\n")
            return
        except RETRIED as refusal:
            refusals[type(refusal).__name__] += 1
            time.sleep(rng.uniform(0, think))
    raise RuntimeError(f"gave up on {path} after 1000 refusals")


def worker_main(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed * 1000 + args.worker)
    refusals: Counter[str] = Counter()
    session: Optional[writ_client.Session] = None
    files: Files
    if args.without_writ:
        files = DirectFiles(Path(args.base))
    else:
        # The lead hands over this actor's token in the environment, not argv
        # (other users can read a process's arguments).
        session = writ_client.Session.connect(os.environ["WRIT_URL"], os.environ["WRIT_TOKEN"])
        files = WritFiles(session.me(f"w{args.worker}"))
    print("ready", flush=True)
    sys.stdin.readline()  # the lead's "go": every worker starts at once
    for k, line in enumerate(expected_lines(args.worker, args.edits)):
        path = SHARED if k % 2 == 0 else own_file(args.worker)
        edit(files, path, line, args.think, rng, refusals)
    print(json.dumps({"worker": args.worker, "edits": args.edits, "refusals": dict(refusals)}), flush=True)
    if session is not None:
        session.close()
    return 0


# -- the lead -----------------------------------------------------------------------


def lost_updates(read: Any, workers: int, edits: int) -> Tuple[int, int]:
    """(updates present, updates lost), counted from the final file contents."""
    present = set()
    for path in [SHARED, *(own_file(w) for w in range(workers))]:
        present.update(read(path).splitlines())
    expected = [line for w in range(workers) for line in expected_lines(w, edits)]
    found = sum(1 for line in expected if line in present)
    return found, len(expected) - found


def lead_main(args: argparse.Namespace) -> int:
    run_dir = f"orchestrator-demo/run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    session: Optional[writ_client.Session] = None
    actors: List[writ_client.Actor] = []
    report: Dict[str, Any] = {"mode": "direct" if args.without_writ else "writ", "workers": args.workers}

    if args.without_writ:
        base = Path(args.root or ".").resolve() / run_dir
        base.mkdir(parents=True)
    else:
        session = writ_client.Session.connect(args.url, args.token, args.root)
        root = session.info().get("root") or args.root or "."
        base = Path(root) / run_dir
        lead = session.actor("lead")
        # Create the run folder through writ so each worker's grant can root in it.
        lead.write(f"{run_dir}/{SHARED}", HEADER)
        tasks = [
            writ_client.Task(f"w{w}", [f"src/w{w}/"]) for w in range(args.workers)
        ] + [writ_client.Task("summary", ["SUMMARY.md"], [f"w{w}" for w in range(args.workers)])]
        waves = session.plan(tasks)
        report["plan_waves"] = waves
        for w in range(args.workers):
            # Each worker writes anywhere in the run folder, call by call; its
            # own folder is fenced for it, so no sibling can touch it.
            actor = lead.child(f"w{w}", root=str(base))
            actors.append(actor)
            actor.fence([f"src/w{w}/"])

    procs: List["subprocess.Popen[str]"] = []
    for w in range(args.workers):
        env = dict(os.environ)
        if session is not None:
            actor = actors[w]
            env.update(WRIT_URL=session.url, WRIT_TOKEN=actor.token or "")
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--worker",
            str(w),
            "--base",
            str(base),
            "--edits",
            str(args.edits),
            "--think",
            str(args.think),
            "--seed",
            str(args.seed),
        ]
        if args.without_writ:
            cmd.append("--without-writ")
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env))
    for proc in procs:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit("a worker failed to start")
    started = time.monotonic()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()

    dump_table = None
    dump_when = "taken while the workers ran"
    if session is not None:
        # A dump taken while the workers run shows who holds and waits for what.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            if [h for h in session.dump()["holds"] if h["kind"] == "call"]:
                dump_table = session.dump_table()
                break

    refusals: Counter[str] = Counter()
    made = 0
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"a worker failed with exit code {proc.returncode}")
        result = json.loads(out.strip().splitlines()[-1])
        made += result["edits"]
        refusals.update(result["refusals"])
    report["seconds"] = round(time.monotonic() - started, 3)

    if session is not None:
        reader = session.actor("auditor", read_only=True, root=str(base))

        def read(path: str) -> str:
            try:
                return reader.read(path)
            except writ_client.NotFound:
                return ""

        present, lost = lost_updates(read, args.workers, args.edits)
        # The plan's last wave: the lead's own summary, once the workers are done.
        lead.write(f"{run_dir}/SUMMARY.md", f"{made} updates made, {lost} lost\n")
        report["counters"] = session.dump()["counters"]
        if dump_table is None:  # the workers finished before a dump caught one at work
            dump_table = session.dump_table()
            dump_when = "after the run"
        session.close()
    else:
        direct = DirectFiles(base)
        present, lost = lost_updates(direct.read, args.workers, args.edits)

    report.update(updates_made=made, updates_present=present, lost_updates=lost, refusals=dict(refusals), folder=str(base))
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"mode:           {'through writ' if session is not None else 'direct writes (--without-writ)'}")
    print(f"folder:         {base}")
    if "plan_waves" in report:
        print(f"plan waves:     {report['plan_waves']}")
    print(f"workers:        {args.workers} processes, {args.edits} edits each, {report['seconds']}s")
    print(f"updates made:   {made}")
    print(f"lost updates:   {lost}   (counted from the final file contents)")
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(refusals.items())) or "none"
    print(f"refusals:       {kinds}   (each retried after a re-read)")
    if "counters" in report:
        print(f"scheduler:      {report['counters']}")
    if dump_table is not None:
        print(f"\nthe dump ({dump_when}):\n" + dump_table)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--edits", type=int, default=20, help="edits per worker (default 20)")
    parser.add_argument("--think", type=float, default=0.01, help="max seconds between read and write (default 0.01)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--without-writ", action="store_true", help="write the files directly, no writ")
    parser.add_argument("--url", help="writ serve URL (default: the discovery file)")
    parser.add_argument("--token", help="session token (default: the discovery file)")
    parser.add_argument("--root", help="the repository (default: where the discovery file is found)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--base", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        return worker_main(args)
    return lead_main(args)


if __name__ == "__main__":
    sys.exit(main())
