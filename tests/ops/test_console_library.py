"""The library under the console, on both stores: the filtered, paginated run query, requeue,
cancels journaled with who, the activity chart's counts and masking of secrets."""

from __future__ import annotations

from pathlib import Path

from browserworker import control
from browserworker.ops import activity, mask
from browserworker.states import RunState
from browserworker.store import SQLStore
from browserworker.store.records import NewRun


def _seed(store: SQLStore) -> None:
    with store.group():
        for i in range(30):
            store.create_run(
                NewRun(
                    id=f"r{i:03d}",
                    flow_name="buy" if i % 3 else "sell",
                    inputs={"n": i},
                    queue="fast" if i % 2 else "default",
                )
            )


def test_search_runs_filters_searches_and_pages(any_store: SQLStore) -> None:
    """search_runs filters by state, flow and queue, finds a run by id, id prefix (LIKE
    wildcards taken literally) or request key, pages newest first and counts all matches."""
    _seed(any_store)
    page, total = any_store.search_runs(limit=10, offset=0)
    assert total == 30 and len(page) == 10
    assert [r.id for r in any_store.search_runs(limit=5, offset=25)[0]] == [f"r{i:03d}" for i in (4, 3, 2, 1, 0)]
    runs, n = any_store.search_runs(flow="sell", queue="default")
    assert n == 5 and {r.id for r in runs} == {"r000", "r006", "r012", "r018", "r024"}
    assert any_store.search_runs(text="r01")[1] == 10
    assert any_store.search_runs(text="r0_1")[1] == 0  # '_' is not a wildcard
    assert any_store.search_runs(text="r007")[0][0].id == "r007"
    control.cancel(any_store, "r005", who="ann")
    assert [r.id for r in any_store.search_runs(state=RunState.CANCELLED)[0]] == ["r005"]
    assert any_store.run_flows() == {"buy": 20, "sell": 10}


def test_search_finds_a_run_by_a_request_key(any_store: SQLStore) -> None:
    """A request key (run/step) journaled by an attempt finds its run."""
    from browserworker.store.records import Owner

    _seed(any_store)
    run = any_store.claim_run("r010", Owner("w", "h", 1), 30)
    assert run is not None
    any_store.begin_attempt("r010", run.lease_epoch, "pay", "effect", "r010/pay", "fp")
    assert [r.id for r in any_store.search_runs(text="r010/pay")[0]] == ["r010"]


def test_requeue_and_bulk_cancel_journal_who(any_store: SQLStore) -> None:
    """cancel_many cancels in one transaction and names refused ids; requeue puts a CANCELLED
    run back in its queue with its id; both journal the operator's name; other states are refused."""
    _seed(any_store)
    outcomes = control.cancel_many(any_store, ["r001", "r002", "nope"], who="ann")
    assert outcomes["r001"] == outcomes["r002"] == "cancelled" and outcomes["nope"].startswith("error")
    assert control.requeue_many(any_store, ["r001", "r003"], who="bob") == {
        "r001": "requeued",
        "r003": "error: run r003 is QUEUED: only FAILED or CANCELLED runs are requeued",
    }
    assert any_store.get_run("r001").state == RunState.QUEUED  # type: ignore[union-attr]
    events = [(e.decision, e.worker, e.detail) for e in any_store.events("r001") if e.kind == "run_state"]
    assert events == [("cancelled", "ann", {"who": "ann"}), ("requeued", "bob", {"who": "bob"})]


def test_activity_counts_lost_leases_per_slot(any_store: SQLStore) -> None:
    """activity() counts lease_expired events into the slot they happened in."""
    _seed(any_store)
    now = any_store.now()
    any_store.record_event("r000", "lease_expired")
    slots = activity(any_store, hours=1, slots=4, now=now + 1)
    assert [s.lease_expiries for s in slots] == [0, 0, 0, 1] and sum(s.duplicates_prevented for s in slots) == 0


def test_mask_hides_secret_inputs_everywhere(any_store: SQLStore) -> None:
    """mask() hides secret inputs by name and by value inside strings, and credential headers."""
    any_store.create_run(
        NewRun(id="s1", flow_name="f", inputs={"password": "hunter22", "item": "tea"}, secret_fields=("password",))
    )
    run = any_store.get_run("s1")
    assert run is not None
    masked = mask({"url": "https://x/?p=hunter22", "password": "hunter22", "headers": {"Set-Cookie": "s=1"}}, run)
    assert masked == {
        "url": "https://x/?p=[redacted]",
        "password": "[redacted]",
        "headers": {"Set-Cookie": "[redacted]"},
    }


def test_only_files_the_journal_names_inside_the_evidence_dir_are_served(tmp_path: Path) -> None:
    """screenshot_file serves a PNG the journal names only inside the evidence directory (not
    a path that climbs out of it, nor another kind of file); recordings_of finds a run's
    recordings and only the traces their meta.json lists inside them."""
    import json

    from browserworker.ops import recordings_of, screenshot_file

    evidence = tmp_path / "db.evidence"
    (evidence / "r1").mkdir(parents=True)
    (evidence / "r1" / "submit-1.png").write_bytes(b"\x89PNG")
    (tmp_path / "outside.png").write_bytes(b"\x89PNG")
    (evidence / "r1" / "notes.txt").write_text("x")
    assert (
        screenshot_file(str(evidence / "r1" / "submit-1.png"), evidence) == (evidence / "r1" / "submit-1.png").resolve()
    )
    assert screenshot_file(str(evidence / ".." / "outside.png"), evidence) is None
    assert screenshot_file(str(evidence / "r1" / "notes.txt"), evidence) is None
    rec = tmp_path / "recordings" / "place-order"
    (rec / "trace").mkdir(parents=True)
    (rec / "trace" / "0001-submit.zip").write_bytes(b"PK")
    (rec / "meta.json").write_text(
        json.dumps({"run_id": "r1", "status": "complete", "traces": ["trace/0001-submit.zip", "../../outside.png"]})
    )
    [found] = recordings_of("r1", tmp_path / "recordings")
    assert found.name == "place-order" and [t.name for t in found.traces] == ["0001-submit.zip"]
    assert recordings_of("r2", tmp_path / "recordings") == []
