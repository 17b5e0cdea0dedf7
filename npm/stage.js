#!/usr/bin/env node
// Lays out the npm packages for `npm pack` / `npm publish`:
//
//   node npm/stage.js OUT [PLATFORM=BINARY ...]
//   node npm/stage.js OUT --from DIR     (DIR/bin-PLATFORM/writ for each)
//   node npm/stage.js --matrix           (the release workflow's matrix)
//
// The platforms are npm/platforms.json's, the one list the release
// workflow (its build matrix, through --matrix), this stager and the
// launcher's optional dependencies are made from. OUT/writ-sched is the
// launcher package, its optionalDependencies the shipped platforms' at
// Cargo.toml's version; OUT/PLATFORM (e.g. linux-x64) is
// @writ-sched/PLATFORM with BINARY as its bin/writ (bin/writ.exe on
// win32). Refuses, naming the difference, when the version in
// npm/writ-sched/package.json is not Cargo.toml's or when it lists
// optional dependencies of its own (a second list to drift).
"use strict";

const fs = require("fs");
const path = require("path");

// Every platform the release workflow builds: npm's `os`, `cpu` (and
// `libc`), the Rust target and the runner; `ships: false` for one that is
// built only to say when it works (`why` says why not yet).
const ALL = JSON.parse(fs.readFileSync(path.join(__dirname, "platforms.json"), "utf8"));
const exeOf = (spec) => (spec.os === "win32" ? "writ.exe" : "writ");
// The prebuilt binaries npm ships, by platform name. On a platform with
// none the launcher says there is no prebuilt writ (WSL runs the Linux one).
const PLATFORMS = Object.fromEntries(ALL.filter((p) => p.ships).map((p) => [p.platform, p]));

function fail(message) {
  process.stderr.write(`npm/stage.js: ${message}\n`);
  process.exit(1);
}

if (process.argv[2] === "--matrix") {
  // Every platform, with the binary's file name, for `fromJSON` in the
  // release workflow's build matrix.
  console.log(JSON.stringify(ALL.map((p) => ({ ...p, exe: exeOf(p) }))));
  process.exit(0);
}

const repo = path.resolve(__dirname, "..");
let [out, ...binaries] = process.argv.slice(2);
if (!out) {
  fail("usage: node npm/stage.js OUT [PLATFORM=BINARY ... | --from DIR] | --matrix");
}
if (binaries[0] === "--from") {
  if (binaries.length !== 2) {
    fail("--from takes one folder, holding bin-PLATFORM/writ for each platform");
  }
  const from = binaries[1];
  binaries = Object.values(PLATFORMS).map(
    (p) => `${p.platform}=${path.join(from, `bin-${p.platform}`, exeOf(p))}`,
  );
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
if (launcher.optionalDependencies) {
  fail("npm/writ-sched/package.json lists optionalDependencies; they are made from npm/platforms.json");
}
launcher.optionalDependencies = Object.fromEntries(
  Object.keys(PLATFORMS).map((p) => [`@writ-sched/${p}`, version]),
);
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
fs.mkdirSync(staged, { recursive: true });
fs.writeFileSync(path.join(staged, "package.json"), JSON.stringify(launcher, null, 2) + "\n");
copy(path.join(launcherDir, "README.md"), path.join(staged, "README.md"));
copy(path.join(launcherDir, "bin", "writ.js"), path.join(staged, "bin", "writ.js"), 0o755);
console.log(staged);

for (const arg of binaries) {
  const [platform, binary] = arg.split(/=(.*)/s);
  const spec = PLATFORMS[platform];
  if (!spec || !binary) {
    fail(`${arg}: expected PLATFORM=BINARY with PLATFORM one of ${Object.keys(PLATFORMS).join(", ")}`);
  }
  if (!fs.existsSync(binary)) {
    fail(`${platform}: no binary at ${binary}`);
  }
  const dir = path.join(out, platform);
  fs.rmSync(dir, { recursive: true, force: true });
  const exe = exeOf(spec);
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
