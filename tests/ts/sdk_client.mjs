// Drives writ serve with the official MCP TypeScript SDK, as an agent does:
// a named agent reads a file, the model thinks for three lease TTLs, then
// it writes; then a write into a path another agent holds must come back
// as writ's sentence; then the session is ended.
//
// Usage: node sdk_client.mjs SDK_DIR CONFIG_JSON [hold|race]
// CONFIG is {"url": MCP_URL, "token": TOKEN, "ttl": SECONDS}. Prints one
// JSON object. `hold`: an unnamed session reserves k/, prints, and waits
// to be killed. `race`: two named agents write one file they both read.
// `count`: an unnamed session counts to 5 through read_file/write_file.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, configPath, mode] = process.argv.slice(2);
const config = JSON.parse(readFileSync(configPath, "utf8"));
const load = (rel) => import(pathToFileURL(join(sdkDir, "dist", "esm", rel)).href);
const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");

const warnings = [];
for (const level of ["warn", "error"]) {
  const original = console[level];
  console[level] = (...args) => {
    warnings.push(args.map(String).join(" "));
    original(...args);
  };
}

const text = (result) => result.content.map((c) => c.text ?? "").join("");
const open = async (agent) => {
  const headers = { Authorization: `Bearer ${config.token}` };
  if (agent) headers["Writ-Agent"] = agent;
  const transport = new StreamableHTTPClientTransport(new URL(config.url), { requestInit: { headers } });
  const client = new Client({ name: "ts-sdk", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
};

if (mode === "hold") {
  const { client } = await open(null);
  const held = await client.callTool({ name: "reserve", arguments: { paths: ["k/"] } });
  console.log(JSON.stringify({ reserved: !held.isError, text: text(held) }));
  await new Promise(() => {});
}

if (mode === "count") {
  // A program, not a model: it counts through read_file and write_file on
  // an unnamed session, reading the number off the first line of the
  // answer (content[0]). The SDK validates each result's structuredContent
  // against the tool's outputSchema as it goes.
  const { client } = await open(null);
  const blocks = [];
  const same = [];
  const seen = (result) => {
    blocks.push(result.content.length);
    same.push(result.structuredContent?.text === result.content[0]?.text);
  };
  for (let i = 0; i < 5; i++) {
    const read = await client.callTool({ name: "read_file", arguments: { path: "counter.txt" } });
    seen(read);
    const n = Number(read.content[0].text.split("\n")[0].split("\t")[1]);
    const written = await client.callTool({
      name: "write_file",
      arguments: { path: "counter.txt", content: `${n + 1}\n` },
    });
    seen(written);
  }
  await client.close();
  console.log(JSON.stringify({ blocks, same, warnings }));
  process.exit(0);
}

if (mode === "race") {
  const racers = await Promise.all(["ts-left", "ts-right"].map(async (name) => ({ name, ...(await open(name)) })));
  for (const r of racers) await r.client.callTool({ name: "read_file", arguments: { path: "race.md" } });
  const writes = await Promise.all(
    racers.map((r) => r.client.callTool({ name: "write_file", arguments: { path: "race.md", content: `${r.name}\n` } })),
  );
  for (const r of racers) await r.client.close();
  const results = racers.map((r, i) => ({ agent: r.name, error: Boolean(writes[i].isError), text: text(writes[i]) }));
  console.log(JSON.stringify({ results, warnings }));
  process.exit(0);
}

const { client, transport } = await open("ts-agent");
const read = await client.callTool({ name: "read_file", arguments: { path: "notes.md" } });
await new Promise((resolve) => setTimeout(resolve, 3 * config.ttl * 1000));
const written = await client.callTool({
  name: "write_file",
  arguments: { path: "notes.md", content: "from typescript\n" },
});
const held = await client.callTool({
  name: "write_file",
  arguments: { path: "held/ts.md", content: "mine\n" },
});
let terminated = "ok";
try {
  await transport.terminateSession();
} catch (e) {
  terminated = String(e);
}
await client.close();
console.log(
  JSON.stringify({
    read_error: Boolean(read.isError),
    write_error: Boolean(written.isError),
    write: text(written),
    held_error: Boolean(held.isError),
    held: text(held),
    terminated,
    warnings,
  }),
);
