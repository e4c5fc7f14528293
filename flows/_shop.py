"""Helpers shared by the example flows: the sandbox shop's inputs and login."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field, SecretStr

from browserworker import StepContext

ORDER_PAGE = re.compile(r"/orders/\d+$")


class Order(BaseModel):
    """What to order, and from where."""

    base_url: str = Field(description="The shop, e.g. http://127.0.0.1:8800")
    item: str
    quantity: int = Field(default=1, ge=1, le=100)
    username: str = "demo"
    password: SecretStr = SecretStr("demo")


async def log_in(ctx: StepContext[Order]) -> None:
    """Sign in through the login form (a POST that is safe to repeat)."""
    page = ctx.page
    await page.goto(f"{ctx.inputs.base_url}/login?next=/orders/new")
    await page.fill("#username", ctx.inputs.username)
    await page.fill("#password", ctx.inputs.password.get_secret_value())
    await page.click("#login")
    await page.wait_for_url("**/orders/new")


async def log_in_over_http(ctx: StepContext[Order]) -> None:
    """Sign in without the page: GET the login form for its CSRF token and POST it with
    ``page.request`` (the context's cookie jar keeps the session)."""
    base = ctx.inputs.base_url
    form = await ctx.page.request.get(f"{base}/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', await form.text())
    assert token, "no CSRF token on the login page"
    await ctx.page.request.post(
        f"{base}/login",
        form={
            "csrf_token": token.group(1),
            "username": ctx.inputs.username,
            "password": ctx.inputs.password.get_secret_value(),
            "next": "/healthz",
        },
    )


async def submit_order_form(ctx: StepContext[Order]) -> dict:
    """Fill and submit the order form; return the new order's id or raise with the page's errors."""
    page = ctx.page
    await page.fill("#item", ctx.inputs.item)
    await page.fill("#quantity", str(ctx.inputs.quantity))
    await page.fill("#reference", ctx.request_key)  # stable across retries: lets a verifier find it
    async with page.expect_navigation() as navigation:
        await page.click("#submit")
    response = await navigation.value
    if not ORDER_PAGE.search(page.url):
        errors = await page.locator(".error").all_text_contents()
        status = response.status if response else "no response"
        raise RuntimeError(f"order not placed (HTTP {status}): {'; '.join(errors) or page.url}")
    return {"order_id": await page.text_content("#order-id")}
