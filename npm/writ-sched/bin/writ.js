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
// A signal sent to this process (a supervisor's SIGTERM) reaches writ, which
// stops cleanly; one from the terminal reaches both already.
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(signal, () => child.kill(signal));
}
child.on("error", (err) => {
  process.stderr.write(`writ-sched: cannot run ${err.path || "writ"}: ${err.message}\n`);
  process.exit(1);
});
child.on("exit", (code, signal) => {
  if (signal) {
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
  } else {
    process.exit(code);
  }
});
