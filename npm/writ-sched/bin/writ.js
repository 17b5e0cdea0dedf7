#!/usr/bin/env node
// Runs the `writ` binary of this platform's package (@writ-sched/OS-CPU),
// which npm installed as an optional dependency: the one whose `os` and
// `cpu` match this machine. No install script: nothing runs at install
// time, so package managers that block install scripts install it as is.
"use strict";

const { spawn } = require("child_process");
const path = require("path");

const pkg = `@writ-sched/${process.platform}-${process.arch}`;
const exe = process.platform === "win32" ? "writ.exe" : "writ";

function binary() {
  if (process.env.WRIT_BINARY) {
    return process.env.WRIT_BINARY;
  }
  try {
    return path.join(path.dirname(require.resolve(`${pkg}/package.json`)), "bin", exe);
  } catch {
    process.stderr.write(
      `writ-sched: no prebuilt writ for ${process.platform}-${process.arch}: ` +
        `${pkg} is not installed (no such package for this platform, or optional ` +
        "dependencies were omitted). Build it from source with " +
        "`cargo install writ-sched`, or set WRIT_BINARY to a writ binary.\n",
    );
    process.exit(1);
  }
}

// Run by `npx` (from npm's npx cache), writ is not on PATH: tell it, so
// that `writ config` writes `npx -y writ-sched` for the clients to run.
const env = { ...process.env };
if (!env.WRIT_LAUNCHER && __dirname.split(path.sep).includes("_npx")) {
  env.WRIT_LAUNCHER = "npx";
}
const child = spawn(binary(), process.argv.slice(2), { stdio: "inherit", env });
let exited = false;
// A signal sent to this process (a supervisor's SIGTERM, `kill -USR2`)
// reaches writ, which decides what it means; this process then ends as
// writ did. Without a listener node would die of it (SIGUSR2, SIGQUIT),
// leaving writ running without its parent, or start its inspector
// (SIGUSR1). One from the terminal reaches both already.
const forwarded = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"];
for (const signal of forwarded) {
  process.on(signal, () => {
    if (!exited) {
      child.kill(signal);
    }
  });
}
// Whatever ends this process otherwise (an error in this script) ends
// writ too: it never runs on without its launcher.
process.on("exit", () => {
  if (!exited) {
    child.kill("SIGTERM");
  }
});
child.on("error", (err) => {
  exited = true;
  process.stderr.write(`writ-sched: cannot run ${err.path || "writ"}: ${err.message}\n`);
  process.exit(1);
});
child.on("exit", (code, signal) => {
  exited = true;
  if (!signal) {
    process.exit(code);
  }
  // Ends by the same signal, so a supervisor sees what writ died of.
  // The last listener removed, libuv puts the signal's default action
  // back: node's own use of it (SIGUSR1 starts the inspector, SIGPIPE is
  // ignored) is gone too. A listener is added first for signals that had
  // none, so that removing it does that.
  try {
    process.on(signal, () => {});
  } catch {
    // SIGKILL and SIGSTOP take no listener; their default stands.
  }
  process.removeAllListeners(signal);
  process.kill(process.pid, signal);
  // Should the signal not end this process, its exit status still says
  // which one ended writ, as a shell would.
  const number = require("os").constants.signals[signal] || 0;
  setTimeout(() => process.exit(128 + number), 1000);
});
