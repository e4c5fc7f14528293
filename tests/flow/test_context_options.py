"""A flow's browser context options: checked when it loads, computed from its inputs, and
reaching the page (HTTP Basic auth and a locale, against the sandbox)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from browserworker.errors import FlowDefinitionError, InputError
from browserworker.flow import Flow
from browserworker.sandbox.app import BASIC_PASSWORD, BASIC_USER
from tests.support.bw import BW

FLOW = """
from pydantic import BaseModel, SecretStr
from browserworker import Flow, StepContext


class Inputs(BaseModel):
    base_url: str
    user: str
    password: SecretStr


flow = Flow("staff", inputs=Inputs, context=lambda inputs: {
    "http_credentials": {"username": inputs.user, "password": inputs.password.get_secret_value()},
    "locale": "fr-FR",
})


@flow.step
async def look(ctx: StepContext[Inputs]) -> dict:
    answer = await ctx.page.goto(ctx.inputs.base_url + "/staff")
    if answer.status != 200:
        return {"status": answer.status}
    return {"status": answer.status, "language": await ctx.page.text_content("#language")}
"""


def test_context_options_are_checked_when_the_flow_loads() -> None:
    """A name ``Browser.new_context`` does not take, or the kit's own ``service_workers``, is a
    flow definition error naming it; a function of the inputs is checked when it answers."""
    assert Flow("ok", context={"locale": "de-DE", "viewport": {"width": 800, "height": 600}}).context == {
        "locale": "de-DE",
        "viewport": {"width": 800, "height": 600},
    }
    with pytest.raises(FlowDefinitionError, match="'colour'"):
        Flow("bad", context={"locale": "de-DE", "colour": "red"})
    with pytest.raises(FlowDefinitionError, match="service_workers"):
        Flow("ours", context={"service_workers": "allow"})
    computed = Flow("later", context=lambda inputs: {"user_agnet": "x"})
    with pytest.raises(InputError, match="'user_agnet'"):
        computed.context_options(computed.validate_inputs({}))


@pytest.mark.browser
def test_credentials_and_locale_from_the_inputs_reach_the_page(bw: BW, shop: Any, tmp_path: Path) -> None:
    """Basic-auth credentials computed from the run's (secret) inputs and a locale open the
    sandbox's staff page, which answers 401 without them; the password appears in no view
    and no log line."""
    flow = tmp_path / "staff.py"
    flow.write_text(FLOW)
    done = bw.run(
        "run",
        str(flow),
        "--db",
        str(bw.db),
        "--input",
        f"base_url={shop.url}",
        "--input",
        f"user={BASIC_USER}",
        "--input",
        f"password={BASIC_PASSWORD}",
        "--run-id",
        "staff-1",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    view = bw.show("staff-1")
    [look] = view["journal"]
    assert look["result"] == {"status": 200, "language": "fr-FR"}
    assert BASIC_PASSWORD not in done.stdout + done.stderr + json.dumps(view)
    wrong = bw.run(
        "run",
        str(flow),
        "--db",
        str(bw.db),
        "--input",
        f"base_url={shop.url}",
        "--input",
        f"user={BASIC_USER}",
        "--input",
        "password=nope",
        "--run-id",
        "staff-2",
    )
    assert wrong.returncode == 0, wrong.stderr
    [denied] = bw.show("staff-2")["journal"]
    assert denied["result"]["status"] == 401
