"""The tools' text arguments reach the agent service as the agent wrote them (the MCP SDK's
in-memory client; a stand-in service records what it is given, no browser)."""

from __future__ import annotations

import asyncio
from typing import Any

from mcp import Client

from browserworker.mcp import build_server


class _Recorder:
    """Stands in for :class:`~browserworker.agent.AgentService`: records each call's arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        async def method(*args: Any, **kwargs: Any) -> dict[str, Any]:
            self.calls.append((name, args, kwargs))
            return {"status": "committed"}

        return method


LOOKS_LIKE_JSON = ['{"status": "done"}', '["tea", 2]', "null", "true", "12"]


def test_text_that_reads_as_json_reaches_the_tool_as_written_and_null_as_none() -> None:
    """A text the page shows may be JSON (an API's answer, a JSON output box): ``wait_for`` gets
    it as the agent wrote it, not parsed (the SDK parses arguments not typed ``str`` as JSON
    first: a dict was refused, ``"null"`` became None); so does an effect key, a selector and a
    key to press. A null, or an argument left out, is None. The published schema says string
    or null."""
    service = _Recorder()

    async def scenario() -> dict[str, Any]:
        async with Client(build_server(service)) as client:  # type: ignore[arg-type]
            for text in LOOKS_LIKE_JSON:
                answer = await client.call_tool("wait_for", {"run_id": "r", "text": text, "gone": None})
                assert not answer.is_error, answer.content
                answer = await client.call_tool(
                    "submit", {"run_id": "r", "selector": text, "effect_key": text, "key": text}
                )
                assert not answer.is_error, answer.content
            await client.call_tool("open_session", {"site": "http://127.0.0.1:1/", "session_key": "null"})
            return {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}

    schemas = asyncio.run(scenario())
    waits = [args for name, args, _ in service.calls if name == "wait_for"]
    assert waits == [("r", text, None, 10.0) for text in LOOKS_LIKE_JSON]
    submits = [(args, kwargs["key"]) for name, args, kwargs in service.calls if name == "submit"]
    assert submits == [(("r", None, text, text, None, False), text) for text in LOOKS_LIKE_JSON]
    assert ("open_session", ("http://127.0.0.1:1/", "null"), {}) in service.calls
    string_or_null = [{"type": "string"}, {"type": "null"}]
    assert schemas["wait_for"]["properties"]["text"]["anyOf"] == string_or_null
    assert schemas["submit"]["properties"]["effect_key"]["anyOf"] == string_or_null
    assert "e12" in schemas["click"]["properties"]["ref"]["description"]
