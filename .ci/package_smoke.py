"""A user's first minute with an installed writ, run by .ci/package.

Usage: python package_smoke.py --writ CMD --root DIR --agent-python PY
       [--python-client] [--version V]

CMD is how the user runs writ (`writ` from the wheel, or `npx --no-install
writ-sched`). From DIR, the way a user types it: `CMD --version`, `CMD serve .`
(its first lines: the URL, then the live page's link with its token); an
agent on the official MCP Python SDK (run by PY, with tests/py/mcp_driver.py)
writes, reads and edits through the stdio bridge `CMD mcp .` and through
/mcp; with --python-client, `import writ_client` (from the wheel) fences a
folder and sees another actor refused; then `CMD serve --stop .`. Every
check that fails raises; the seconds from `serve` to the agent's first
landed write are printed.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

DRIVER = Path(__file__).resolve().parent.parent / "tests" / "py" / "mcp_driver.py"


def check(ok, what):
    if not ok:
        raise SystemExit(f"package smoke: {what}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--writ", required=True, help="the command, split like a shell would")
    parser.add_argument("--root", required=True)
    parser.add_argument("--agent-python", required=True)
    parser.add_argument("--python-client", action="store_true")
    parser.add_argument("--version")
    args = parser.parse_args()
    writ = shlex.split(args.writ)
    root = Path(args.root).resolve()

    out = subprocess.run([*writ, "--version"], cwd=root, capture_output=True, text=True, timeout=60)
    check(out.returncode == 0, f"--version failed: {out.stderr}")
    if args.version:
        check(out.stdout.strip() == f"writ {args.version}", f"--version said {out.stdout!r}")
    print(f"{' '.join(writ)} --version: {out.stdout.strip()}")

    started = time.monotonic()
    serve = subprocess.Popen([*writ, "serve", "."], cwd=root, stdout=subprocess.PIPE, text=True)
    try:
        first = serve.stdout.readline()
        check(first.startswith("writ serve: http://127.0.0.1:"), f"serve said {first!r}")
        url = first.split()[2]
        page = serve.stdout.readline()
        # The token goes into a link only on a terminal; here stdout is a pipe.
        check(page.startswith(f"live page: {url}/ ("), f"serve's second line: {page!r}")
        check("#token=" not in page.split("(", 1)[1].replace("#token=TOKEN", ""),
              f"serve printed a token to a pipe: {page!r}")
        found = json.loads((root / ".writ" / "serve.json").read_text())
        token = found["token"]
        check(found["url"] == url, f"serve.json names {found['url']}, serve printed {url}")

        script = {
            "agents": {
                "bridge": {"stdio": [*writ, "mcp", ".", "--agent", "bridge"], "env": {"PATH": os.environ["PATH"]}},
                "http": {"http": f"{url}/mcp", "token": token},
            },
            "steps": [
                {"agent": "bridge", "tool": "write_file", "args": {"path": "notes.md", "content": "one\n"}},
                {"agent": "bridge", "tool": "read_file", "args": {"path": "notes.md"}},
                {"agent": "http", "tool": "read_file", "args": {"path": "notes.md"}},
                {"agent": "http", "tool": "edit_file",
                 "args": {"path": "notes.md", "old_string": "one", "new_string": "two"}},
                # The bridge's read is older than the edit: the gate refuses.
                {"agent": "bridge", "tool": "write_file", "args": {"path": "notes.md", "content": "lost\n"}},
            ],
        }
        script_file = root.parent / f"{root.name}-mcp-script.json"
        script_file.write_text(json.dumps(script))
        agent = subprocess.run(
            [args.agent_python, str(DRIVER), str(script_file)],
            cwd=root, capture_output=True, text=True, timeout=120,
        )
        check(agent.returncode == 0, f"the MCP driver failed: {agent.stderr}")
        answers = [json.loads(line) for line in agent.stdout.splitlines() if line.strip()]
        check(len(answers) == 5, f"the MCP driver answered {agent.stdout!r}")
        wrote, _, read, edited, refused = answers
        check(wrote.get("is_error") is False, f"write_file through the bridge: {wrote}")
        print(f"an MCP agent's first write landed {time.monotonic() - started:.1f}s after `serve`")
        check(read.get("is_error") is False and "one" in read["text"], f"read_file over /mcp: {read}")
        check(edited.get("is_error") is False, f"edit_file over /mcp: {edited}")
        check(refused.get("is_error") is True and "changed since" in refused["text"],
              f"a stale write was not refused: {refused}")
        check((root / "notes.md").read_text() == "two\n", "notes.md is not the edited text")

        if args.python_client:
            client = subprocess.run([sys.executable, "-c", FENCE], cwd=root, capture_output=True,
                                    text=True, timeout=60)
            check(client.returncode == 0, f"writ_client: {client.stdout}{client.stderr}")
            print(client.stdout.strip())

        stop = subprocess.run([*writ, "serve", "--stop", "."], cwd=root, capture_output=True,
                              text=True, timeout=60)
        check(stop.returncode == 0, f"serve --stop: {stop.stdout}{stop.stderr}")
        check(serve.wait(timeout=30) == 0, f"serve ended with {serve.returncode}")
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    print("package smoke: ok")


# Run by the wheel's own Python: the client it ships drives a fence.
FENCE = """
import writ_client
from writ_client import Busy, Session
session = Session.connect(root=".")
lead = session.actor("lead")
parser = lead.child("parser", fenced=["src/"])
try:
    lead.try_admit(["src/lex.rs"])
    raise SystemExit("the fence did not refuse another actor")
except Busy as busy:
    holder = busy.holder
assert holder == "parser", holder
session.close()
print(f"writ_client from {writ_client.__file__}: the fence refused the lead ({holder} holds it)")
"""

if __name__ == "__main__":
    main()
