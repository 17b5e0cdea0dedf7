"""Drives writ serve with MCP clients nobody here wrote, as agents use them.

Usage: python agent_frameworks.py SCENARIO CONFIG_JSON

CONFIG is {"url": MCP_URL, "token": TOKEN, "root": ROOT, "ttl": SECONDS}.
Each scenario prints one JSON object on stdout; the Rust test asserts on it.
A model "thinks" by sleeping three lease TTLs between a read and a write:
that pause is the thing under test, not a synchronization.

Scenarios:
  sdk_pause     official Python SDK over Streamable HTTP, named agent
  sdk_bridge    the same through the `writ mcp ROOT` stdio bridge
  sdk_race      two SDK agents write one file they both read, at once
  sdk_hold      an SDK agent reserves k/, prints "reserved", then waits
  langgraph     LangGraph create_react_agent + langchain-mcp-adapters
                get_tools() (a session per call), a scripted chat model
                making parallel tool calls
  langgraph_race  two such agents write one file they both read, at once
  agents_sdk    the OpenAI Agents SDK with a scripted Model and its default
                timeouts, writing into a path another agent holds
  agents_race   two Agents SDK agents write one file they both read
  agents_hold   an Agents SDK MCP server session reserves k/, waits
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


async def sdk_bridge(config):
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=config["writ"], args=["mcp", config["root"], "--agent", "bridged"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            first = await session.call_tool("read_file", {"path": "notes.md"})
            await asyncio.sleep(3 * config["ttl"])
            written = await session.call_tool("write_file", {"path": "notes.md", "content": "through the bridge\n"})
            return {"read_error": first.isError, "write_error": written.isError, "write": text_of(written)}


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


def scripted_chat_model(turns, think_before, barrier=None):
    """A chat model answering each turn from `turns`; before turn
    `think_before` it thinks three lease TTLs (or waits at `barrier`)."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.outputs import ChatGeneration, ChatResult

    class ScriptedChatModel(BaseChatModel):
        turn: int = 0
        pause: float = 0.0

        @property
        def _llm_type(self):
            return "scripted"

        def bind_tools(self, tools, **kwargs):
            return self

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            raise NotImplementedError("the graph runs asynchronously")

        async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
            if self.turn == think_before:
                if barrier is not None:
                    await barrier.wait()
                else:
                    await asyncio.sleep(self.pause)
            message = turns[min(self.turn, len(turns) - 1)]
            self.turn += 1
            return ChatResult(generations=[ChatGeneration(message=message)])

    return ScriptedChatModel


async def langgraph_agent(config, name, model):
    from langchain_core.messages import ToolMessage
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langgraph.prebuilt import create_react_agent

    client = MultiServerMCPClient(
        {"writ": {"transport": "streamable_http", "url": config["url"], "headers": headers(config, name)}}
    )
    tools = await client.get_tools()
    graph = create_react_agent(model, tools)
    state = await graph.ainvoke({"messages": [("user", "edit")]})
    outputs = [
        {
            "id": m.tool_call_id,
            "text": m.content if isinstance(m.content, str) else json.dumps(m.content),
            "status": getattr(m, "status", "success"),
        }
        for m in state["messages"]
        if isinstance(m, ToolMessage)
    ]
    return tools, outputs


async def langgraph_race(config):
    from langchain_core.messages import AIMessage

    barrier = asyncio.Barrier(2)

    def racer(name):
        turns = [
            AIMessage(content="", tool_calls=[{"name": "read_file", "args": {"path": "race.md"}, "id": "r"}]),
            AIMessage(content="", tool_calls=[{"name": "write_file", "args": {"path": "race.md", "content": f"{name}\n"}, "id": "w"}]),
            AIMessage(content="done"),
        ]
        model = scripted_chat_model(turns, 1, barrier)()
        return langgraph_agent(config, name, model)

    done = await asyncio.gather(racer("lg-left"), racer("lg-right"))
    return {"results": [{"agent": name, "write": outputs[-1]} for name, (_, outputs) in zip(["lg-left", "lg-right"], done)]}


async def langgraph(config):
    from langchain_core.messages import AIMessage

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

    model = scripted_chat_model(turns, 1)(pause=3 * config["ttl"])
    tools, outputs = await langgraph_agent(config, "planner", model)
    return {"tools": sorted(t.name for t in tools), "outputs": outputs}


async def agents_run(config, name, script):
    """Runs one Agents SDK agent named `name` whose scripted model answers
    turn n with `await script(n)` (a list of (tool, arguments), or None to
    end); returns the tool outputs the model saw, by call id."""
    from agents import Agent, ModelSettings, Runner, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.mcp import MCPServerStreamableHttp
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    # Tracing exports to OpenAI's service; there is none here.
    set_tracing_disabled(True)
    seen = {}

    class ScriptedModel(Model):
        def __init__(self):
            self.turn = 0

        async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **kwargs):
            for item in input if isinstance(input, list) else []:
                item = item if isinstance(item, dict) else getattr(item, "model_dump", lambda: {})()
                if item.get("type") == "function_call_output":
                    seen.setdefault(item.get("call_id"), str(item.get("output")))
            self.turn += 1
            calls = await script(self.turn)
            if calls:
                output = [
                    ResponseFunctionToolCall(
                        id=f"fc{self.turn}-{i}", call_id=f"call{self.turn}-{i}", name=tool,
                        arguments=json.dumps(arguments), type="function_call", status="completed",
                    )
                    for i, (tool, arguments) in enumerate(calls)
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
    server = MCPServerStreamableHttp(params={"url": config["url"], "headers": headers(config, name)}, name="writ")
    async with server:
        agent = Agent(name=name, instructions="edit", model=ScriptedModel(), mcp_servers=[server], model_settings=ModelSettings())
        await Runner.run(agent, "edit", max_turns=6)
    return seen


async def agents_sdk(config):
    async def script(turn):
        if turn == 1:
            return [("read_file", {"path": "notes.md"})]
        if turn == 2:
            # Thinks three lease TTLs, then writes the file it read and one
            # in a path another agent holds.
            await asyncio.sleep(3 * config["ttl"])
            return [
                ("write_file", {"path": "notes.md", "content": "from the agents sdk\n"}),
                ("write_file", {"path": "held/x.md", "content": "mine\n"}),
            ]
        return None

    seen = await agents_run(config, "coder", script)
    return {"outputs": [{"call_id": k, "output": v} for k, v in seen.items()]}


async def agents_race(config):
    barrier = asyncio.Barrier(2)

    def racer(name):
        async def script(turn):
            if turn == 1:
                return [("read_file", {"path": "race.md"})]
            if turn == 2:
                await barrier.wait()
                return [("write_file", {"path": "race.md", "content": f"{name}\n"})]
            return None

        return agents_run(config, name, script)

    done = await asyncio.gather(racer("ag-left"), racer("ag-right"))
    return {"results": [{"agent": name, "write": seen.get("call2-0", "")} for name, seen in zip(["ag-left", "ag-right"], done)]}


async def agents_hold(config):
    from agents import set_tracing_disabled
    from agents.mcp import MCPServerStreamableHttp

    set_tracing_disabled(True)
    server = MCPServerStreamableHttp(params={"url": config["url"], "headers": headers(config)}, name="writ")
    async with server:
        result = await server.call_tool("reserve", {"paths": ["k/"]})
        print(json.dumps({"reserved": not result.isError, "text": text_of(result)}), flush=True)
        await asyncio.sleep(3600)


SCENARIOS = {
    "sdk_pause": sdk_pause,
    "sdk_bridge": sdk_bridge,
    "sdk_race": sdk_race,
    "sdk_hold": sdk_hold,
    "langgraph": langgraph,
    "langgraph_race": langgraph_race,
    "agents_sdk": agents_sdk,
    "agents_race": agents_race,
    "agents_hold": agents_hold,
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
