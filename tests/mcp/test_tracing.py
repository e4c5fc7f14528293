"""The SDK's OpenTelemetry spans: kept where a tracer provider is configured, left out of the
call's path where none is (each scenario in a process of its own, as the global tracer provider
can be set once per process; a stand-in service, no browser)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

SCENARIO = textwrap.dedent(
    """
    import asyncio, json, sys
    from contextlib import contextmanager

    from opentelemetry import trace
    from mcp import Client

    from browserworker.mcp import build_server

    spans = []

    class Tracer(trace.Tracer):
        def start_span(self, name, *args, **kwargs):
            spans.append(name)
            return trace.INVALID_SPAN

        @contextmanager
        def start_as_current_span(self, name, *args, **kwargs):
            with trace.use_span(self.start_span(name)) as span:
                yield span

    class Provider(trace.TracerProvider):
        def get_tracer(self, *args, **kwargs):
            return Tracer()

    class Service:  # stands in for AgentService: every method answers at once
        def __getattr__(self, name):
            async def method(*args, **kwargs):
                return {"status": "seen"}

            return method

    if sys.argv[1] == "configured":
        trace.set_tracer_provider(Provider())

    async def main():
        server = build_server(Service())
        async with Client(server) as client:
            answer = await client.call_tool("wait_for", {"run_id": "r", "text": "done"})
        print(json.dumps({
            "middleware": [type(m).__name__ for m in server.middleware],
            "answered": not answer.is_error,
            "spans": spans,
        }))

    asyncio.run(main())
    """
)


def _scenario(tracing: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", SCENARIO, tracing], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_with_no_tracer_provider_the_sdks_span_middleware_is_left_out() -> None:
    """No tracer provider configured (nothing would record a span): the server's middleware chain
    has no OpenTelemetry middleware, and a tool call is answered as before."""
    result = _scenario("none")
    assert result["answered"]
    assert "OpenTelemetryMiddleware" not in result["middleware"]
    assert result["spans"] == []


def test_with_a_tracer_provider_each_tool_call_is_a_span() -> None:
    """A tracer provider configured before the server is built: the SDK's middleware stays, and
    the tool call reaches the provider as its span (``tools/call wait_for``)."""
    result = _scenario("configured")
    assert result["answered"]
    assert "OpenTelemetryMiddleware" in result["middleware"]
    assert "tools/call wait_for" in result["spans"]
