"""Backup in the middle of a busy drain (real worker processes, real Chromium, the sandbox shop),
restore, and resume: every run ends SUCCEEDED with exactly one order, because the effects the
old fleet dispatched after the backup are reconciled by the verifier, never replayed blindly."""

from __future__ import annotations

import collections
import json
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from browserworker.cli import main
from browserworker.states import AttemptState, RunState
from browserworker.store import open_store
from tests.support.bw import BW
from tests.support.fleet import enqueue_many, start_worker, states, wait_until_done
from tests.support.paths import FLOWS

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def stop(proc: Any, timeout: float = 60) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return int(proc.wait(timeout=timeout))


def backup_contents(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Each run's state in the backup, and the state of its latest submit attempt (+ " sent")."""
    conn = sqlite3.connect(path)
    try:
        runs = dict(conn.execute("SELECT id, state FROM runs"))
        submits = {
            run_id: f"{state}{' sent' if sent else ''}"
            for run_id, state, sent in conn.execute(
                "SELECT run_id, state, dispatched_at IS NOT NULL FROM attempts a WHERE step_id = 'submit' AND attempt_no = "
                "(SELECT MAX(attempt_no) FROM attempts b WHERE b.run_id = a.run_id AND b.step_id = 'submit')"
            )
        }
        return runs, submits
    finally:
        conn.close()


def test_backup_mid_drain_restore_and_resume_without_duplicate_orders(tmp_path: Path, shop: Any) -> None:
    """Two workers drain 16 orders; a backup is taken mid-drain and the drain completes (every order
    placed). Restoring the backup while the workers run is refused; after they stop it goes through,
    and a worker resumes the runs the backup shows unfinished: each ends SUCCEEDED by the verifier
    finding its order (duplicate_prevented), and every reference has exactly one order."""
    n = 16
    db, copy = tmp_path / "bw.db", tmp_path / "backup.db"
    ids = enqueue_many(db, "short_order.py", shop, n, prefix=f"bk-{tmp_path.name[-6:]}")
    shop.set_faults(delay_before_commit=0.3)  # orders take a while: some are in flight at the backup
    workers = [start_worker(db, "-n", "3", log=tmp_path / f"w{i}.log") for i in range(2)]
    try:
        deadline = time.monotonic() + 120
        while states(db)["SUCCEEDED"] < 4:
            assert time.monotonic() < deadline, dict(states(db))
            time.sleep(0.1)
        taken = CliRunner().invoke(main, ["backup", str(copy), "--db", str(db)])
        assert taken.exit_code == 0, taken.output
        refused = CliRunner().invoke(main, ["restore", str(copy), "--db", str(db)])
        assert refused.exit_code == 2 and "in use" in refused.output and len(refused.output.splitlines()) == 1
        wait_until_done(db, n, timeout=240)
    finally:
        codes = [stop(w) for w in workers]
    assert codes == [0, 0]
    shop.clear_faults()
    assert all(len(shop.orders(f"{i}/submit")) == 1 for i in ids)  # the world: every order placed once

    in_backup, submits = backup_contents(copy)
    unfinished = sorted(i for i, s in in_backup.items() if s != RunState.SUCCEEDED)
    # unfinished runs whose order the backup does not show placed: they must be verified, not replayed
    in_doubt = [i for i in unfinished if submits.get(i) != "SUCCEEDED sent"]
    assert len(in_doubt) >= 3, (in_backup, submits)  # the backup really was taken mid-drain
    print(
        f"\nbackup: {dict(collections.Counter(in_backup.values()))}; latest submit attempts of unfinished runs: "
        f"{dict(collections.Counter(submits.get(i, 'none') for i in unfinished))}"
    )

    restored = CliRunner().invoke(main, ["restore", str(copy), "--db", str(db)])
    assert restored.exit_code == 0, restored.output
    assert f"{len(unfinished)} unfinished runs will reconcile" in restored.output
    assert states(db) == {"SUCCEEDED": n - len(unfinished), "QUEUED": len(unfinished)}

    resume = start_worker(db, "-n", "4", "--once", log=tmp_path / "resume.log")
    assert resume.wait(timeout=240) == 0, (tmp_path / "resume.log").read_text()[-3000:]

    assert states(db) == {"SUCCEEDED": n}
    assert all(len(shop.orders(f"{i}/submit")) == 1 for i in ids)  # nothing was placed twice
    store = open_store(db)
    try:
        for run_id in ids:
            ok = [a for a in store.attempts(run_id) if a.step_id == "submit" and a.state == AttemptState.SUCCEEDED]
            assert len(ok) == 1, (run_id, ok)
            prevented = [e for e in store.events(run_id) if e.decision == "duplicate_prevented"]
            if run_id in in_doubt:
                assert ok[0].decided_by == "verifier" and len(prevented) == 1, store.attempts(run_id)
                assert not any(a.dispatched_at and a.intent_at > prevented[0].at for a in store.attempts(run_id))
            else:
                assert ok[0].decided_by == "return" and not prevented
    finally:
        store.close()
    print(
        f"resumed {len(unfinished)} unfinished runs: {len(in_doubt)} duplicate_prevented by the verifier, "
        f"0 replays; orders per reference: 1"
    )


def test_restored_effect_without_verifier_waits_for_a_person(bw: BW, shop: Any, run_id: str, tmp_path: Path) -> None:
    """A run backed up before its effect, completed, then restored: with no verifier nothing can
    prove the order was not placed after the backup, so `run --run-id` parks it (exit 3) instead of
    placing it again."""
    copy = tmp_path / "backup.db"

    def cli(*args: str) -> Any:
        return CliRunner().invoke(main, [*args, "--db", str(bw.db)])

    created = cli(
        "enqueue",
        str(FLOWS / "place_order_unverified.py"),
        "--run-id",
        run_id,
        "--input",
        f"base_url={shop.url}",
        "--input",
        "item=tea",
    )
    assert created.exit_code == 0, created.output
    assert cli("backup", str(copy)).exit_code == 0
    first = bw.run_flow("place_order_unverified.py", "--run-id", run_id)
    assert first.returncode == 0, first.stderr
    assert len(shop.orders(f"{run_id}/submit")) == 1
    assert cli("restore", str(copy)).exit_code == 0
    again = bw.run_flow("place_order_unverified.py", "--run-id", run_id)
    assert again.returncode == 3, again.stderr
    assert len(shop.orders(f"{run_id}/submit")) == 1
    view = json.loads(cli("show", run_id, "--json").output)
    [submit] = [a for a in view["journal"] if a["step_id"] == "submit"]
    assert (submit["state"], submit["decided_by"], submit["dispatched_at"]) == ("UNKNOWN", "restore:unproven", None)
    assert "restored from a backup" in cli("review").output
