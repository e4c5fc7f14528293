"""A flow full of secrets, for the redaction tests: a SecretStr password typed into a password
field, an API token (an input marked secret) sent in an Authorization header, a query
parameter and a JSON body, and a note named in ``Flow(redact=[...])``."""

from __future__ import annotations

from urllib.parse import quote

from pydantic import BaseModel, Field, SecretStr

from browserworker import Flow, StepContext, Verdict


class Inputs(BaseModel):
    base_url: str
    username: str
    password: SecretStr
    api_token: str = Field(json_schema_extra={"secret": True})
    note: str
    item: str = "tea"


flow = Flow("secret-order", inputs=Inputs, redact=["note"])


@flow.step(sends=True)
async def login(ctx: StepContext[Inputs]) -> None:
    page = ctx.page
    await page.goto(f"{ctx.inputs.base_url}/login?next=/orders/new")
    await page.fill("#username", ctx.inputs.username)
    await page.fill("#password", ctx.inputs.password.get_secret_value())
    await page.click("#login")
    await page.wait_for_url("**/orders/new")


@flow.step
async def look_up(ctx: StepContext[Inputs]) -> dict:
    status = await ctx.page.evaluate(
        """async ([token, note]) => {
            const url = '/api/orders?reference=none&token=' + encodeURIComponent(token) + '&note=' + encodeURIComponent(note);
            const r = await fetch(url, {headers: {'Authorization': 'Bearer ' + token}});
            return r.status;
        }""",
        [ctx.inputs.api_token, ctx.inputs.note],
    )
    return {"status": status}


@flow.effect(idempotent=True, settle=2)
async def submit(ctx: StepContext[Inputs]) -> dict:
    reply = await ctx.page.evaluate(
        """async ([item, reference, token, note]) => {
            const r = await fetch('/api/orders', {
                method: 'POST',
                headers: {'Content-Type': 'application/json', 'Idempotency-Key': reference},
                body: JSON.stringify({item, quantity: 1, reference, api_token: token, note}),
            });
            return {status: r.status, body: await r.json()};
        }""",
        [ctx.inputs.item, ctx.request_key, ctx.inputs.api_token, ctx.inputs.note],
    )
    if reply["status"] not in (200, 201):
        raise RuntimeError(f"order API answered {reply['status']}: {reply['body']}")
    return {"order_id": str(reply["body"]["id"])}


@submit.verify
async def submit_landed(ctx: StepContext[Inputs]) -> Verdict:
    await ctx.page.goto(f"{ctx.inputs.base_url}/orders?ref={quote(ctx.request_key)}")
    row = ctx.page.locator(".order-row")
    if await row.count():
        return Verdict.done({"order_id": await row.first.get_attribute("data-id")})
    return Verdict.not_done()
