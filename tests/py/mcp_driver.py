"""Drives writ's MCP tools with the official MCP Python SDK.

Usage: python mcp_driver.py SCRIPT.json

SCRIPT is {"agents": {NAME: AGENT}, "steps": [STEP, ...]} where AGENT is
  {"stdio": [command, arg, ...], "env": {...}}   a server process on stdio, or
  {"http": URL, "token": TOKEN}                  a Streamable HTTP endpoint,
optionally with "client": true: the SDK's high-level `mcp.Client` at its
defaults (it negotiates the current revision, 2026-07-28, where the server
offers it: no session), instead of a handshake-era `ClientSession`; with
"mode": M it is pinned to that mode (e.g. "2026-07-28" or "legacy"). A
`ClientSession` agent opens its session at its first step, with
clientInfo.name = NAME.
STEP is
  {"agent": NAME, "tool": TOOL, "args": {...}}   call a tool,
  {"agent": NAME, "list_tools": true}            list the tools,
  {"agent": NAME, "close": true}                 end that agent's session;
a call step with "agent_from": K passes as its `agent` argument the handle
step K's result gave (structuredContent.agent).
Each agent's session opens at its first step, with clientInfo.name = NAME.
Prints one JSON line per step: {"is_error": bool, "text": str, "content":
[block, ...], "structured": obj, "schema_error": str | null} for a call
(`schema_error`: why the result does not validate against the tool's
output schema, refusals included; the SDK raises on a success that does
not), {"tools": [{"name", "title",
"description", "input_schema", "output_schema", "annotations"}]} for a listing,
{"closed": true} for a close, or {"error": str} when the step raised.
"""

import contextlib
import json
import sys

import anyio
import httpx2
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation


def stdio_params(spec):
    """The server process an agent's spec names."""
    command, *args = spec["stdio"]
    return StdioServerParameters(command=command, args=args, env=spec.get("env"))


def http_headers(spec):
    """The headers an agent's spec gives its HTTP requests."""
    headers = {}
    if spec.get("token"):
        headers["Authorization"] = "Bearer " + spec["token"]
    headers.update(spec.get("headers") or {})
    return headers


async def open_client(stack, name, spec):
    """Enters an `mcp.Client` of one agent on `stack`, at its defaults but
    for the mode the spec pins."""
    if "stdio" in spec:
        server = stdio_params(spec)
    else:
        http = await stack.enter_async_context(httpx2.AsyncClient(headers=http_headers(spec)))
        server = streamable_http_client(spec["http"], http_client=http)
    options = {"mode": spec["mode"]} if spec.get("mode") else {}
    return await stack.enter_async_context(Client(server, **options))


async def open_session(stack, name, spec):
    """Enters the transport and the client session of one agent on `stack`."""
    if spec.get("client"):
        return await open_client(stack, name, spec)
    if "stdio" in spec:
        read, write = await stack.enter_async_context(stdio_client(stdio_params(spec)))
    else:
        client = await stack.enter_async_context(
            httpx2.AsyncClient(headers=http_headers(spec), timeout=httpx2.Timeout(30.0))
        )
        read, write = await stack.enter_async_context(
            streamable_http_client(spec["http"], http_client=client)
        )
    session = await stack.enter_async_context(
        ClientSession(read, write, client_info=Implementation(name=name, version="1.0"))
    )
    await session.initialize()
    return session


async def schema_error(session, tool, result):
    """Why the result's structured content does not validate against the
    tool's output schema, or None. The SDK validates a success itself (a
    failure raises from call_tool); a refusal (isError) is validated here
    with the SDK's own check, since a client that shows the model only
    structuredContent shows it refusals too."""
    if not result.is_error:
        return None
    checker = getattr(session, "session", session)
    try:
        await checker.validate_tool_result(tool, result)
    except RuntimeError as e:
        return str(e)
    return None


async def perform(session, step):
    if step.get("list_tools"):
        tools = await session.list_tools()
        return {
            "tools": [
                {
                    "name": t.name,
                    "title": t.title,
                    "description": t.description,
                    "input_schema": t.input_schema,
                    "output_schema": t.output_schema,
                    "annotations": t.annotations.model_dump(by_alias=True, exclude_none=True)
                    if t.annotations
                    else None,
                }
                for t in tools.tools
            ]
        }
    result = await session.call_tool(step["tool"], step.get("args"))
    text = "\n".join(c.text for c in result.content if c.type == "text")
    out = {
        "is_error": bool(result.is_error),
        "text": text,
        "content": [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in result.content],
        "structured": result.structured_content,
        "schema_error": await schema_error(session, step["tool"], result),
    }
    if step.get("protocol"):
        out["protocol"] = session.protocol_version
    return out


async def agent_task(name, spec, inbox, outbox):
    """Runs one agent in its own task, so that its transport's cancel scopes
    are entered and exited by the same task, whatever order agents close in."""
    try:
        async with contextlib.AsyncExitStack() as stack:
            session = None
            async for step in inbox:
                if step.get("close"):
                    break
                try:
                    if session is None:
                        session = await open_session(stack, name, spec)
                    out = await perform(session, step)
                except Exception as e:  # the test asserts on what happened
                    out = {"error": f"{type(e).__name__}: {e}"}
                await outbox.send(out)
    except Exception as e:
        await outbox.send({"error": f"{type(e).__name__}: {e}"})
        return
    await outbox.send({"closed": True})


async def run(script):
    agents = {}
    async with anyio.create_task_group() as tg:
        for name, spec in script["agents"].items():
            to_agent, inbox = anyio.create_memory_object_stream(1)
            outbox, from_agent = anyio.create_memory_object_stream(1)
            agents[name] = {"to": to_agent, "from": from_agent, "open": True}
            tg.start_soon(agent_task, name, spec, inbox, outbox)
        results = []
        for step in script["steps"]:
            agent = agents[step["agent"]]
            if "agent_from" in step:
                # The handle an earlier step's result gave, passed as `agent`.
                handle = (results[step["agent_from"]].get("structured") or {}).get("agent")
                step = dict(step, args=dict(step.get("args") or {}, agent=handle))
            if not agent["open"]:
                out = {"error": "this agent's session already ended"}
            else:
                await agent["to"].send(step)
                out = await agent["from"].receive()
                if step.get("close"):
                    agent["open"] = False
            results.append(out)
            print(json.dumps(out), flush=True)
        for agent in agents.values():
            if agent["open"]:
                await agent["to"].send({"close": True})
                await agent["from"].receive()
            await agent["to"].aclose()


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        script = json.load(f)
    anyio.run(run, script)


if __name__ == "__main__":
    main()
