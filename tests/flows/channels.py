"""Test flows: one effect that changes the target through one channel of the page.

``channel`` names a page of tests/support/channel_target.py (``form``, ``fetch``, ``websocket``,
``popup``...) or ``api`` (``ctx.page.request.post``). The action opens the channel's page;
the effect fires it and waits until the target has counted the landing. With ``die``, the
first attempt then SIGKILLs its own process: the target has the effect, the journal has what
the gate wrote, and nothing else. Two flows: ``channels`` (a verifier and a count probe)
and ``channels-unverified`` (neither).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Literal
from urllib.parse import quote

from pydantic import BaseModel

from browserworker import Flow, StepContext, Verdict

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Inputs(BaseModel):
    base_url: str
    channel: str
    die: bool = False
    die_leaving: bool = False


def _key(ctx: StepContext[Inputs]) -> str:
    return quote(f"{ctx.run_id}/fire", safe="")


def _get(url: str) -> int:
    with _OPENER.open(url, timeout=60) as reply:
        return int(json.load(reply)["count"])


async def open_channel(ctx: StepContext[Inputs]) -> None:
    channel = ctx.inputs.channel
    if channel != "api":
        await ctx.page.goto(f"{ctx.inputs.base_url}/page/{channel}?key={_key(ctx)}")
    if channel == "websocket":
        await ctx.page.wait_for_function("document.title === 'open'")


async def fire(ctx: StepContext[Inputs]) -> dict:
    base, channel = ctx.inputs.base_url, ctx.inputs.channel
    if channel == "api":
        await ctx.page.request.post(f"{base}/land?key={_key(ctx)}", data="x")
    else:
        await ctx.page.click("#go")
    if channel == "shared-worker" and not os.environ.get("BROWSERWORKER_SHARED_WORKERS"):
        await ctx.page.wait_for_function("document.title !== ''")  # blocked: nothing will land
        return {"title": await ctx.page.title()}
    if channel == "blank-popup":  # Chromium aborts what such a popup sends; the gate journals it all the same
        await ctx.page.wait_for_function("document.title === 'sent'")
        return {"title": await ctx.page.title()}
    # until the target has counted it (a long poll answered by the target, not a sleep)
    count = await asyncio.to_thread(_get, f"{base}/wait?key={_key(ctx)}&n=1")
    if channel == "redirect":  # the page has the chain's last answer
        await ctx.page.wait_for_function("document.title === 'answered'")
    if ctx.inputs.die and ctx.attempt_no == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"count": count}


async def landed(ctx: StepContext[Inputs]) -> Verdict:
    reply = await ctx.page.request.get(f"{ctx.inputs.base_url}/count?key={_key(ctx)}")
    return Verdict.done() if (await reply.json())["count"] else Verdict.not_done()


async def landings(ctx: StepContext[Inputs]) -> int:
    reply = await ctx.page.request.get(f"{ctx.inputs.base_url}/count?key={_key(ctx)}")
    return int((await reply.json())["count"])


def _fire_in_action(mode: Literal["warn", "fail"]) -> Callable[[StepContext[Inputs]], Awaitable[None]]:
    async def fire_in_action(ctx: StepContext[Inputs]) -> None:
        """An action firing a channel (an undeclared side effect): ``api``, a page request
        (``fetch``...) or a socket message. It waits for the request's end, or in warn mode for
        a socket message to land; in fail mode it returns as soon as the message is sent."""
        if ctx.inputs.channel == "api":
            await ctx.page.request.post(f"{ctx.inputs.base_url}/land?key={_key(ctx)}", data="x")
            return
        if ctx.inputs.channel == "websocket":
            await ctx.page.click("#go")
            if mode == "warn":
                await asyncio.to_thread(_get, f"{ctx.inputs.base_url}/wait?key={_key(ctx)}&n=1")
            return
        async with ctx.page.expect_request(lambda r: "/land" in r.url) as seen:
            await ctx.page.click("#go")
        await (await seen.value).response()  # its answer, or None once it was refused

    return fire_in_action


async def arm_timer(ctx: StepContext[Inputs]) -> dict:
    """An effect whose click arms a timer that sends after the effect has returned."""
    await ctx.page.click("#go")
    return {"armed": True}


async def after_timer(ctx: StepContext[Inputs]) -> None:
    """The next action: until the timer has fired; with ``die``, the first pass then SIGKILLs
    its own process."""
    if ctx.attempt_no > 1:  # a resumed pass: the effect is not clicked again, nothing is armed
        return
    await ctx.page.wait_for_function("document.title === 'fired'", timeout=30_000)
    if ctx.inputs.die:
        os.kill(os.getpid(), signal.SIGKILL)


async def fire_popup(ctx: StepContext[Inputs]) -> None:
    """An action opening a popup that sends a keepalive POST and closes itself; it waits
    until the popup has closed and the target has counted what it sent."""
    async with ctx.page.context.expect_page() as opened:
        await ctx.page.click("#go")
    popup = await opened.value
    if not popup.is_closed():
        await popup.wait_for_event("close")
    await asyncio.to_thread(_get, f"{ctx.inputs.base_url}/wait?key={_key(ctx)}&n=1&timeout=10")


def _build(name: str, *, verified: bool, dispatch: str | None = None) -> Flow[Inputs]:
    flow: Flow[Inputs] = Flow(name, inputs=Inputs)
    flow.step(id="open_channel")(open_channel)
    effect = flow.effect(id="fire", settle=0, dispatch=dispatch)(fire)
    if verified:
        effect.verify(landed)
        effect.count(landings)
    return flow


def _in_action(name: str, mode: Literal["warn", "fail"]) -> Flow[Inputs]:
    flow: Flow[Inputs] = Flow(name, inputs=Inputs, undeclared_effects=mode)
    flow.step(id="open_channel")(open_channel)
    flow.step(id="fire")(_fire_in_action(mode))
    return flow


async def landed_elsewhere(ctx: StepContext[Inputs]) -> Verdict:
    """A verifier that leaves the page it is given (to read the count on a page of the target)."""
    await ctx.page.goto(f"{ctx.inputs.base_url}/count?key={_key(ctx)}")
    return Verdict.done() if json.loads(await ctx.page.inner_text("body"))["count"] else Verdict.not_done()


async def leave(ctx: StepContext[Inputs]) -> None:
    """An action after the effect that leaves the page; with ``die_leaving`` the first pass
    then SIGKILLs its own process."""
    await ctx.page.goto(f"{ctx.inputs.base_url}/done")
    if ctx.inputs.die_leaving and ctx.attempt_no == 1:
        os.kill(os.getpid(), signal.SIGKILL)


def _leaving() -> Flow[Inputs]:
    flow: Flow[Inputs] = Flow("channels-leaving", inputs=Inputs)
    flow.step(id="open_channel")(open_channel)
    flow.effect(id="fire", settle=0)(fire).verify(landed_elsewhere)
    flow.step(id="leave")(leave)
    return flow


def _timer(name: str, mode: Literal["warn", "fail"] = "warn") -> Flow[Inputs]:
    flow: Flow[Inputs] = Flow(name, inputs=Inputs, undeclared_effects=mode)
    flow.step(id="open_channel")(open_channel)
    flow.effect(id="fire", settle=0)(arm_timer).verify(landed)
    flow.step(id="after")(after_timer)
    return flow


channels = _build("channels", verified=True)
channels_unverified = _build("channels-unverified", verified=False)
channels_glob = _build("channels-glob", verified=True, dispatch="*/land?*")  # a URL glob: GETs too
in_action_warn = _in_action("channels-in-action", "warn")
in_action_fail = _in_action("channels-in-action-fail", "fail")
channels_leaving = _leaving()
channels_timer = _timer("channels-timer")
channels_timer_fail = _timer("channels-timer-fail", "fail")
popup_in_action_fail = Flow("channels-popup-in-action-fail", inputs=Inputs, undeclared_effects="fail")
popup_in_action_fail.step(id="open_channel")(open_channel)
popup_in_action_fail.step(id="fire")(fire_popup)
