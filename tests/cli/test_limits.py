"""``browserworker limits`` (set, list, clear, --json, refusals) and a paused key in ``status``
and ``metrics``; ``Flow(limit=...)`` checked at load and applied at enqueue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from browserworker.cli import main
from browserworker.control import enqueue
from browserworker.errors import FlowDefinitionError, InputError
from browserworker.flow import Flow, load_flow
from browserworker.store import open_store
from tests.support.paths import TEST_FLOWS


def limits(db: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["limits", *args, "--db", db])


def test_set_list_and_clear(store_target: str) -> None:
    """set gives a key a concurrency and a rate (N/s, N/min, N/h), the list shows them (and as
    JSON), clear removes one key or every key."""
    assert limits(store_target, "set", "shop.example", "--concurrency", "2", "--rate", "30/min").exit_code == 0
    assert limits(store_target, "set", "https://api.example:8443", "--rate", "2/s").exit_code == 0
    shown = limits(store_target)
    assert shown.exit_code == 0
    assert "shop.example: concurrency 2, rate 30/min, 0 live, 0 claimed in the last minute" in shown.output
    keys = {b["key"]: b for b in json.loads(limits(store_target, "--json").output)}
    assert keys["https://api.example:8443"]["rate"] == 120 and keys["shop.example"]["concurrency"] == 2
    assert limits(store_target, "clear", "shop.example").exit_code == 0
    assert [b["key"] for b in json.loads(limits(store_target, "--json").output)] == ["https://api.example:8443"]
    assert limits(store_target, "clear", "--all").exit_code == 0
    assert json.loads(limits(store_target, "--json").output) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("set", "k", "--rate", "5/day"), "write N/s, N/min or N/h"),
        (("set", "k", "--rate", "0/min"), "N must be positive"),
        (("set", "k", "--rate", "-3/min"), "write N/s, N/min or N/h"),
        (("set", "k", "--concurrency", "0"), "positive whole number"),
        (("set", "k", "--concurrency", "two"), "is not a valid integer"),
        (("set", "k"), "--concurrency N and/or --rate"),
        (("set", "bad key", "--concurrency", "1"), "invalid limit key"),
        (("clear",), "a KEY or --all"),
        (("clear", "never-set"), "no budget or pause"),
        (("list", "k"), "takes no KEY"),
    ],
)
def test_bad_input_is_refused_with_nothing_written(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    """Each bad call exits 2 with a clear message and writes nothing."""
    db = str(tmp_path / "bw.db")
    assert limits(db, "set", "keep", "--concurrency", "3").exit_code == 0
    result = limits(db, *args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert [(b["key"], b["concurrency"]) for b in json.loads(limits(db, "--json").output)] == [("keep", 3)]


def test_status_and_metrics_show_a_paused_key(store_target: str) -> None:
    """A key paused by a Retry-After shows in status (its reason and time left), in its JSON and
    in the metrics (paused keys, pauses by key)."""
    store = open_store(store_target)
    store.pause_limit("shop.example", 90, "HTTP 429 from http://shop.example/api/orders")
    store.close()
    status = CliRunner().invoke(main, ["status", "--db", store_target])
    assert status.exit_code == 0
    assert "limit keys" in status.output and "HTTP 429 from http://shop.example/api/orders" in status.output
    assert "1m2" in status.output or "1m3" in status.output  # ~90 s left
    snap = json.loads(CliRunner().invoke(main, ["status", "--db", store_target, "--json"]).output)
    [key] = snap["limits"]
    assert key["key"] == "shop.example" and key["paused"]
    metrics = CliRunner().invoke(main, ["metrics", "--db", store_target]).output
    assert "browserworker_limit_paused_keys 1.0" in metrics


def test_flow_limit_is_checked_at_load_and_applied_at_enqueue(tmp_path: Path) -> None:
    """A static limit key is checked when the flow is defined; a key from the inputs is
    computed (and checked) at enqueue, before anything is written; the default is the flow's name."""
    with pytest.raises(FlowDefinitionError, match="invalid limit key"):
        Flow("f", limit="no spaces")
    with pytest.raises(FlowDefinitionError, match="invalid limit key"):
        Flow("f", limit=3)  # type: ignore[arg-type]
    store = open_store(tmp_path / "bw.db")
    loaded = load_flow(TEST_FLOWS / "budget_order.py")
    run = enqueue(store, loaded, {"base_url": "http://x", "item": "a", "site": "shop.example"})
    assert run.limit_key == "shop.example"
    with pytest.raises(InputError, match="invalid limit key"):
        enqueue(store, loaded, {"base_url": "http://x", "item": "b", "site": "two words"})
    assert [r.id for r in store.list_runs()] == [run.id]
    plain = enqueue(store, load_flow(TEST_FLOWS / "short_order.py"), {"base_url": "http://x", "item": "c"})
    assert plain.limit_key == "short-order"
    store.close()
