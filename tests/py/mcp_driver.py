"""Drives writ's MCP tools with the official MCP Python SDK.

Usage: python mcp_driver.py SCRIPT.json

SCRIPT is {"agents": {NAME: AGENT}, "steps": [STEP, ...]} where AGENT is
  {"stdio": [command, arg, ...], "env": {...}}   a server process on stdio, or
  {"http": URL, "token": TOKEN}                  a Streamable HTTP endpoint,
and STEP is
  {"agent": NAME, "tool": TOOL, "args": {...}}   call a tool,
  {"agent": NAME, "list_tools": true}            list the tools,
  {"agent": NAME, "close": true}                 end that agent's session.
Each agent's session opens at its first step, with clientInfo.name = NAME.
Prints one JSON line per step: {"is_error": bool, "text": str} for a call,
{"tools": [{"name", "description", "input_schema"}]} for a listing,
{"closed": true} for a close, or {"error": str} when the step raised.
"""

import contextlib
import json
import sys

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation


class Agent:
    def __init__(self, name, spec):
        self.name = name
        self.spec = spec
        self.stack = None
        self.session = None

    async def open(self):
        self.stack = contextlib.AsyncExitStack()
        await self.stack.__aenter__()
        if "stdio" in self.spec:
            command, *args = self.spec["stdio"]
            params = StdioServerParameters(command=command, args=args, env=self.spec.get("env"))
            read, write = await self.stack.enter_async_context(stdio_client(params))
        else:
            headers = {}
            if self.spec.get("token"):
                headers["Authorization"] = "Bearer " + self.spec["token"]
            client = await self.stack.enter_async_context(
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0))
            )
            read, write = await self.stack.enter_async_context(
                streamable_http_client(self.spec["http"], http_client=client)
            )
        self.session = await self.stack.enter_async_context(
            ClientSession(read, write, client_info=Implementation(name=self.name, version="1.0"))
        )
        await self.session.initialize()

    async def close(self):
        if self.stack is not None:
            await self.stack.__aexit__(None, None, None)
        self.stack = None
        self.session = None


async def run(script):
    agents = {name: Agent(name, spec) for name, spec in script["agents"].items()}
    try:
        for step in script["steps"]:
            agent = agents[step["agent"]]
            try:
                if step.get("close"):
                    await agent.close()
                    out = {"closed": True}
                else:
                    if agent.session is None:
                        await agent.open()
                    if step.get("list_tools"):
                        tools = await agent.session.list_tools()
                        out = {
                            "tools": [
                                {
                                    "name": t.name,
                                    "description": t.description,
                                    "input_schema": t.input_schema,
                                }
                                for t in tools.tools
                            ]
                        }
                    else:
                        result = await agent.session.call_tool(step["tool"], step.get("args"))
                        text = "\n".join(c.text for c in result.content if c.type == "text")
                        out = {"is_error": bool(result.is_error), "text": text}
            except Exception as e:  # the test asserts on what happened
                out = {"error": f"{type(e).__name__}: {e}"}
            print(json.dumps(out), flush=True)
    finally:
        for agent in agents.values():
            with contextlib.suppress(Exception):
                await agent.close()


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        script = json.load(f)
    anyio.run(run, script)


if __name__ == "__main__":
    main()
