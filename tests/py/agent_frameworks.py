"""Drives writ serve with MCP clients nobody here wrote, as agents use them.

Usage: python agent_frameworks.py SCENARIO CONFIG_JSON

CONFIG is {"url": MCP_URL, "token": TOKEN, "root": ROOT, "ttl": SECONDS}.
Each scenario prints one JSON object on stdout; the Rust test asserts on it.
A model "thinks" by sleeping three lease TTLs between a read and a write:
that pause is the thing under test, not a synchronization.

Scenarios:
  sdk_pause     official Python SDK over Streamable HTTP, named agent
  sdk_race      two SDK agents write one file they both read, at once
  sdk_hold      an SDK agent reserves k/, prints "reserved", then waits
  langgraph     LangGraph create_react_agent + langchain-mcp-adapters
                get_tools() (a session per call), a scripted chat model
                making parallel tool calls
  agents_sdk    the OpenAI Agents SDK with a scripted Model and its default
                timeouts, writing into a path another agent holds
"""

import asyncio
import json
import logging
import sys
from pathlib import Path

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


class Warnings(logging.Handler):
    """Every warning any library logs during the run."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = []

    def emit(self, record):
        self.seen.append(f"{record.name}: {record.getMessage()}")


WARNINGS = Warnings()
logging.getLogger().addHandler(WARNINGS)


def headers(config, agent=None):
    h = {"Authorization": "Bearer " + config["token"]}
    if agent:
        h["Writ-Agent"] = agent
    return h


def text_of(result):
    return "".join(getattr(block, "text", "") for block in result.content)


async def sdk_session(config, agent, body):
    async with streamablehttp_client(config["url"], headers=headers(config, agent)) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await body(session)


async def sdk_pause(config):
    async def body(session):
        read = await session.call_tool("read_file", {"path": "notes.md"})
        await asyncio.sleep(3 * config["ttl"])
        written = await session.call_tool("write_file", {"path": "notes.md", "content": "after the pause\n"})
        return {"read_error": read.isError, "write_error": written.isError, "write": text_of(written)}

    return await sdk_session(config, "thinker", body)


async def sdk_race(config):
    ready = asyncio.Barrier(2)

    def racer(name):
        async def body(session):
            await session.call_tool("read_file", {"path": "race.md"})
            await ready.wait()
            result = await session.call_tool("write_file", {"path": "race.md", "content": f"{name}\n"})
            return {"agent": name, "error": result.isError, "text": text_of(result)}

        return sdk_session(config, name, body)

    return {"results": await asyncio.gather(racer("left"), racer("right"))}


async def sdk_hold(config):
    async def body(session):
        result = await session.call_tool("reserve", {"paths": ["k/"]})
        print(json.dumps({"reserved": not result.isError, "text": text_of(result)}), flush=True)
        await asyncio.sleep(3600)

    await sdk_session(config, None, body)


async def langgraph(config):
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langgraph.prebuilt import create_react_agent

    turns = [
        AIMessage(
            content="",
            tool_calls=[
                {"name": "read_file", "args": {"path": "notes.md"}, "id": "c1"},
                {"name": "read_file", "args": {"path": "other.md"}, "id": "c2"},
            ],
        ),
        AIMessage(
            content="",
            tool_calls=[
                {"name": "edit_file", "args": {"path": "notes.md", "old_string": "one", "new_string": "ONE"}, "id": "c3"},
                {"name": "edit_file", "args": {"path": "other.md", "old_string": "two", "new_string": "TWO"}, "id": "c4"},
            ],
        ),
        AIMessage(content="done"),
    ]

    class ScriptedChatModel(BaseChatModel):
        """Answers each turn from the script; thinks before the edits."""

        turn: int = 0

        @property
        def _llm_type(self):
            return "scripted"

        def bind_tools(self, tools, **kwargs):
            return self

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            raise NotImplementedError("the graph runs asynchronously")

        async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
            if self.turn == 1:
                await asyncio.sleep(3 * config["ttl"])
            message = turns[min(self.turn, len(turns) - 1)]
            self.turn += 1
            return ChatResult(generations=[ChatGeneration(message=message)])

    client = MultiServerMCPClient(
        {
            "writ": {
                "transport": "streamable_http",
                "url": config["url"],
                "headers": headers(config, "planner"),
            }
        }
    )
    tools = await client.get_tools()
    graph = create_react_agent(ScriptedChatModel(), tools)
    state = await graph.ainvoke({"messages": [("user", "edit both files")]})
    outputs = [
        {"id": m.tool_call_id, "text": m.content if isinstance(m.content, str) else json.dumps(m.content), "status": getattr(m, "status", "success")}
        for m in state["messages"]
        if isinstance(m, ToolMessage)
    ]
    return {"tools": sorted(t.name for t in tools), "outputs": outputs}


async def agents_sdk(config):
    from agents import Agent, ModelSettings, Runner, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.mcp import MCPServerStreamableHttp
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    # Tracing exports to OpenAI's service; there is none here.
    set_tracing_disabled(True)
    seen_outputs = []

    def call(n, name, arguments):
        return ResponseFunctionToolCall(
            id=f"fc{n}", call_id=f"call{n}", name=name, arguments=json.dumps(arguments), type="function_call", status="completed"
        )

    class ScriptedModel(Model):
        """Reads, thinks three lease TTLs, writes the file it read and one
        in a path another agent holds, ends."""

        def __init__(self):
            self.turn = 0

        async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **kwargs):
            if isinstance(input, list):
                for item in input:
                    item = item if isinstance(item, dict) else getattr(item, "model_dump", lambda: {})()
                    known = {o["call_id"] for o in seen_outputs}
                    if item.get("type") == "function_call_output" and item.get("call_id") not in known:
                        seen_outputs.append({"call_id": item.get("call_id"), "output": str(item.get("output"))})
            self.turn += 1
            if self.turn == 1:
                output = [call(1, "read_file", {"path": "notes.md"})]
            elif self.turn == 2:
                await asyncio.sleep(3 * config["ttl"])
                output = [
                    call(2, "write_file", {"path": "notes.md", "content": "from the agents sdk\n"}),
                    call(3, "write_file", {"path": "held/x.md", "content": "mine\n"}),
                ]
            else:
                output = [
                    ResponseOutputMessage(
                        id="m1", role="assistant", status="completed", type="message",
                        content=[ResponseOutputText(type="output_text", text="done", annotations=[])],
                    )
                ]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args, **kwargs):
            raise NotImplementedError("not streamed")

    # The SDK's defaults: client_session_timeout_seconds=5.
    server = MCPServerStreamableHttp(params={"url": config["url"], "headers": headers(config, "coder")}, name="writ")
    async with server:
        agent = Agent(name="coder", instructions="edit", model=ScriptedModel(), mcp_servers=[server], model_settings=ModelSettings())
        result = await Runner.run(agent, "write the file", max_turns=6)
    return {"final": str(result.final_output), "outputs": seen_outputs}


SCENARIOS = {
    "sdk_pause": sdk_pause,
    "sdk_race": sdk_race,
    "sdk_hold": sdk_hold,
    "langgraph": langgraph,
    "agents_sdk": agents_sdk,
}


def main():
    scenario, config_path = sys.argv[1], sys.argv[2]
    config = json.loads(Path(config_path).read_text())
    result = asyncio.run(SCENARIOS[scenario](config))
    if result is not None:
        result["warnings"] = WARNINGS.seen
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
