#!/usr/bin/env node
// Lays out the npm packages for `npm pack` / `npm publish`:
//
//   node npm/stage.js OUT [PLATFORM=BINARY ...]
//
// OUT/writ-sched is the launcher package; OUT/PLATFORM (e.g. linux-x64) is
// @writ-sched/PLATFORM with BINARY as its bin/writ (bin/writ.exe on
// win32). Refuses, naming the difference, when a version in
// npm/writ-sched/package.json is not Cargo.toml's or when its optional
// dependencies are not exactly PLATFORMS below, so a release cannot
// publish a launcher that points at packages that do not exist.
"use strict";

const fs = require("fs");
const path = require("path");

// One entry per prebuilt binary: npm's `os` and `cpu` names, and the Rust
// target the release workflow builds it for.
const PLATFORMS = {
  "linux-x64": { os: "linux", cpu: "x64", libc: "glibc", target: "x86_64-unknown-linux-gnu" },
  "linux-arm64": { os: "linux", cpu: "arm64", libc: "glibc", target: "aarch64-unknown-linux-gnu" },
  "darwin-x64": { os: "darwin", cpu: "x64", target: "x86_64-apple-darwin" },
  "darwin-arm64": { os: "darwin", cpu: "arm64", target: "aarch64-apple-darwin" },
  // No win32-x64 yet: writ's file layer is POSIX-only (the release
  // workflow's Windows build says when that changes). On Windows the
  // launcher says there is no prebuilt writ, and WSL runs the Linux one.
};

function fail(message) {
  process.stderr.write(`npm/stage.js: ${message}\n`);
  process.exit(1);
}

const repo = path.resolve(__dirname, "..");
const [out, ...binaries] = process.argv.slice(2);
if (!out) {
  fail("usage: node npm/stage.js OUT [PLATFORM=BINARY ...]");
}

const cargo = fs.readFileSync(path.join(repo, "Cargo.toml"), "utf8");
const version = (/^\[package\][^[]*?^version\s*=\s*"([^"]+)"/m.exec(cargo) || [])[1];
if (!version) {
  fail("no [package] version in Cargo.toml");
}

const launcherDir = path.join(__dirname, "writ-sched");
const launcher = JSON.parse(fs.readFileSync(path.join(launcherDir, "package.json"), "utf8"));
if (launcher.version !== version) {
  fail(`npm/writ-sched/package.json has version ${launcher.version}, Cargo.toml ${version}`);
}
const wanted = Object.keys(PLATFORMS).map((p) => `@writ-sched/${p}`).sort();
const listed = Object.keys(launcher.optionalDependencies || {}).sort();
if (JSON.stringify(wanted) !== JSON.stringify(listed)) {
  fail(`optionalDependencies are ${listed.join(", ")}; expected ${wanted.join(", ")}`);
}
for (const [name, v] of Object.entries(launcher.optionalDependencies)) {
  if (v !== version) {
    fail(`optionalDependencies["${name}"] is ${v}, Cargo.toml's version is ${version}`);
  }
}
if (launcher.scripts && Object.keys(launcher.scripts).some((s) => /install/.test(s))) {
  fail("the launcher must have no install scripts");
}

function copy(from, to, mode) {
  fs.mkdirSync(path.dirname(to), { recursive: true });
  fs.copyFileSync(from, to);
  if (mode) {
    fs.chmodSync(to, mode);
  }
}

const staged = path.join(out, "writ-sched");
fs.rmSync(staged, { recursive: true, force: true });
copy(path.join(launcherDir, "package.json"), path.join(staged, "package.json"));
copy(path.join(launcherDir, "README.md"), path.join(staged, "README.md"));
copy(path.join(launcherDir, "bin", "writ.js"), path.join(staged, "bin", "writ.js"), 0o755);
console.log(staged);

for (const arg of binaries) {
  const [platform, binary] = arg.split(/=(.*)/s);
  const spec = PLATFORMS[platform];
  if (!spec || !binary) {
    fail(`${arg}: expected PLATFORM=BINARY with PLATFORM one of ${Object.keys(PLATFORMS).join(", ")}`);
  }
  const dir = path.join(out, platform);
  fs.rmSync(dir, { recursive: true, force: true });
  const exe = spec.os === "win32" ? "writ.exe" : "writ";
  copy(binary, path.join(dir, "bin", exe), 0o755);
  const manifest = {
    name: `@writ-sched/${platform}`,
    version,
    description: `The writ command for ${platform} (${spec.target}); installed by writ-sched.`,
    license: launcher.license,
    os: [spec.os],
    cpu: [spec.cpu],
    ...(spec.libc ? { libc: [spec.libc] } : {}),
    files: [`bin/${exe}`],
    preferUnplugged: true,
  };
  fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify(manifest, null, 2) + "\n");
  fs.writeFileSync(
    path.join(dir, "README.md"),
    `# @writ-sched/${platform}\n\nThe \`writ\` binary for ${platform}. Install \`writ-sched\`, which picks this package on this platform.\n`,
  );
  console.log(dir);
}
