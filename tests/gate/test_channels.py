"""Every channel a page can change the world by is held, blocked or detected by the dispatch
gate, in real Chromium against a target of our own that counts what it receives
(tests/support/channel_target.py, the flows in tests/flows/channels.py).

The crash tests SIGKILL the run's own process *after the target has counted the landing*
(the effect waits for the target, then kills itself), resume it with ``--run-id`` and check
the business outcome on the target: exactly one landing with a verifier, NEEDS_REVIEW (and
still one landing) without one.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.bw import BW
from tests.support.channel_target import ChannelTarget
from tests.support.paths import TEST_FLOWS

pytestmark = pytest.mark.browser

FLOW = str(TEST_FLOWS / "channels.py")
LANDING = ["form", "fetch", "beacon", "worker", "redirect", "pagehide", "popup", "websocket", "api"]
HELD = {
    "form": "held",
    "fetch": "held",
    "beacon": "held",
    "worker": "held",
    "redirect": "held",
    "websocket": "websocket",
    "api": "api",
}


@pytest.fixture(scope="module")
def target() -> Iterator[ChannelTarget]:
    with ChannelTarget() as server:
        yield server


def _run(
    bw: BW, flow: str, run_id: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return bw.run("run", FLOW, "--flow", flow, "--db", str(bw.db), "--run-id", run_id, *args, env=env)


def _inputs(target: ChannelTarget, channel: str, *, die: bool = False) -> list[str]:
    return ["--input", f"base_url={target.url}", "--input", f"channel={channel}", "--input", f"die={die}"]


def _fire(show: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in show["journal"] if a["step_id"] == "fire"]


@pytest.mark.parametrize("channel", LANDING)
def test_a_kill_after_the_target_received_it_lands_exactly_once(
    bw: BW, target: ChannelTarget, run_id: str, channel: str
) -> None:
    """Killed after the target counted the effect, the resumed run asks the verifier (the
    first attempt is journaled as dispatched, never as "nothing left") and does not send again."""
    first = _run(bw, "channels", run_id, *_inputs(target, channel, die=True))
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    assert target.landings(f"{run_id}/fire") == 1
    resumed = _run(bw, "channels", run_id)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    show = bw.show(run_id)
    assert show["run"]["state"] == "SUCCEEDED"
    crashed = _fire(show)[0]
    assert crashed["dispatched_at"] is not None
    assert (crashed["state"], crashed["decided_by"]) == ("SUCCEEDED", "verifier")
    assert HELD.get(channel, "detected") in {row["channel"] for row in crashed["outbox"]}
    assert target.landings(f"{run_id}/fire") == 1


@pytest.mark.parametrize("channel", LANDING)
def test_without_a_verifier_the_kill_goes_to_review_with_one_landing(
    bw: BW, target: ChannelTarget, run_id: str, channel: str
) -> None:
    """Without a verifier nor idempotency, the same kill parks the run for a person: never replayed."""
    first = _run(bw, "channels-unverified", run_id, *_inputs(target, channel, die=True))
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    resumed = _run(bw, "channels-unverified", run_id)
    assert resumed.returncode == 3, resumed.stderr[-2000:]
    assert bw.show(run_id)["run"]["state"] == "NEEDS_REVIEW"
    assert target.landings(f"{run_id}/fire") == 1


@pytest.mark.parametrize(
    ("channel", "point"),
    [("websocket", "after_dispatch_commit"), ("api", "after_dispatch_commit"), ("websocket", "after_dispatch")],
)
def test_a_socket_message_or_an_api_call_is_crashed_at_the_points_after_its_commit(
    bw: BW, target: ChannelTarget, run_id: str, channel: str, point: str
) -> None:
    """A socket message and a ``page.request`` call pass the fault points after their dispatch
    commit as a held request does: killed just after the commit, nothing reached the target and
    the resumed run's verifier says not done, so it is sent once more; killed once the message
    was handed to the socket, the verifier decides. Either way it lands exactly once."""
    crash = {"BROWSERWORKER_FAULTS": f"{point}:fire=kill"}
    first = _run(bw, "channels", run_id, *_inputs(target, channel), env=crash)
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    if point == "after_dispatch_commit":
        assert target.landings(f"{run_id}/fire") == 0, "journaled as sent, not yet sent"
    resumed = _run(bw, "channels", run_id)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    crashed = _fire(bw.show(run_id))[0]
    assert crashed["dispatched_at"] is not None and crashed["decided_by"] == "verifier"
    if point == "after_dispatch_commit":
        assert crashed["state"] == "NOT_DONE"
    assert target.landings(f"{run_id}/fire") == 1


@pytest.mark.parametrize("channel", ["websocket", "api"])
def test_a_socket_message_or_an_api_call_held_past_its_lease_is_sent_once_by_the_new_owner(
    bw: BW, target: ChannelTarget, channel: str
) -> None:
    """Paused while the gate holds a socket message or a ``page.request`` call, past its lease
    (chaos's ``lease_expired_while_alive``): the new owner finds nothing sent and sends it once;
    the stale owner, woken, cannot commit it, so it never leaves."""
    done = bw.run(
        "chaos",
        FLOW,
        "--flow",
        "channels",
        *_inputs(target, channel),
        "--points",
        "lease_expired_while_alive",
        "--json",
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    [result] = json.loads(done.stdout)["results"]
    assert (result["fired"], result["classification"], result["landings"], result["verdict"]) == (
        True,
        "FAILED_BEFORE_SEND (recovery:no_dispatch)",
        1,
        "ok",
    ), result


def _stopped(proc: subprocess.Popen[str], timeout: float = 60) -> None:
    """Until the child has stopped itself (SIGSTOP at its fault point)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        state = Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[0]
        if state == "T":
            return
        time.sleep(0.02)
    raise AssertionError("the run never reached its fault point")


@pytest.mark.parametrize("channel", LANDING)
def test_a_held_channel_cannot_reach_the_target_before_its_commit(
    bw: BW, target: ChannelTarget, run_id: str, channel: str
) -> None:
    """With the store's write lock held while the channel fires, nothing reaches the target
    until the lock is released and the dispatch is committed. (For ``pagehide`` and ``popup``
    what waits is the navigation that opens the door: away from the page, into the popup.)"""
    proc = bw.start(
        "run",
        FLOW,
        "--flow",
        "channels",
        "--db",
        str(bw.db),
        "--run-id",
        run_id,
        *_inputs(target, channel),
        env={"BROWSERWORKER_FAULTS": "dispatch_held:fire=stop"},
    )
    _stopped(proc)  # the gate holds the channel, before its commit
    lock = sqlite3.connect(bw.db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    os.kill(proc.pid, signal.SIGCONT)
    held = target.wait_for(f"{run_id}/fire", 1, timeout=1.5)  # the commit waits for the lock meanwhile
    released = time.time()
    lock.execute("ROLLBACK")
    lock.close()
    _, err = proc.communicate(timeout=120)
    assert not held, "the target received a held dispatch before its commit"
    assert proc.returncode == 0, err[-2000:]
    with sqlite3.connect(bw.db) as conn:
        [(dispatched_at,)] = conn.execute(
            "SELECT dispatched_at FROM attempts WHERE run_id = ? AND step_id = 'fire'", (run_id,)
        ).fetchall()
    assert dispatched_at is not None  # its commit could only go through once the lock was gone...
    assert target.first_at(f"{run_id}/fire") >= released  # ...and only then did it reach the target
    assert target.landings(f"{run_id}/fire") == 1


def test_shared_workers_are_blocked_and_count_as_dispatched_when_allowed(
    bw: BW, target: ChannelTarget, run_id: str
) -> None:
    """A SharedWorker (which no route sees) cannot be made by default; allowed, what it sends
    lands and the attempt is journaled as possibly dispatched."""
    done = _run(bw, "channels", run_id, *_inputs(target, "shared-worker"))
    assert done.returncode == 0, done.stderr[-2000:]
    [fire] = _fire(bw.show(run_id))
    assert fire["result"]["title"].startswith("blocked")
    assert fire["dispatched_at"] is None and target.landings(f"{run_id}/fire") == 0

    allowed = f"{run_id}-allowed"
    done = _run(
        bw, "channels", allowed, *_inputs(target, "shared-worker"), env={"BROWSERWORKER_SHARED_WORKERS": "allow"}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert target.landings(f"{allowed}/fire") == 1
    [fire] = _fire(bw.show(allowed))
    assert fire["dispatched_at"] is not None
    assert [row["method"] for row in fire["outbox"] if row["channel"] == "detected"] == ["SHAREDWORKER"]


def test_a_popup_its_opener_scripts_is_detected(bw: BW, target: ChannelTarget, run_id: str) -> None:
    """An about:blank popup that its opener makes send and close is reported by the browser but
    never routed: the gate journals it as possibly dispatched."""
    done = _run(bw, "channels", run_id, *_inputs(target, "blank-popup"))
    assert done.returncode == 0, done.stderr[-2000:]
    [fire] = _fire(bw.show(run_id))
    assert fire["dispatched_at"] is not None
    assert {"POPUP", "PAGEHIDE"} <= {row["method"] for row in fire["outbox"] if row["channel"] == "detected"}
    assert any("sent it without asking the gate" in item for item in fire["evidence"]["detected"])


def test_a_store_outage_while_a_detected_channel_fires_still_journals_the_dispatch(
    bw: BW, target: ChannelTarget, run_id: str
) -> None:
    """The store locked past its busy timeout while a detected channel fires: the detection
    writes fail, the gate writes them again once the store is back, and the attempt never ends
    as "SUCCEEDED with nothing journaled"."""
    proc = bw.start(
        "run",
        FLOW,
        "--flow",
        "channels",
        "--db",
        str(bw.db),
        "--run-id",
        run_id,
        *_inputs(target, "blank-popup"),
        env={"BROWSERWORKER_FAULTS": "after_intent_commit:fire=stop", "BROWSERWORKER_BUSY_TIMEOUT": "0.2"},
    )
    _stopped(proc)
    lock = sqlite3.connect(bw.db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    os.kill(proc.pid, signal.SIGCONT)
    try:
        assert proc.wait(timeout=1.5) is None
    except subprocess.TimeoutExpired:
        pass  # still waiting for the store, as it should
    lock.execute("ROLLBACK")
    lock.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert "could not be journaled" in err
    [fire] = _fire(bw.show(run_id))
    assert fire["state"] == "SUCCEEDED" and fire["dispatched_at"] is not None
    assert fire["evidence"]["unjournaled"] and all("journaled late" in i for i in fire["evidence"]["unjournaled"])


def test_a_redirected_dispatch_keeps_its_chain_and_does_not_stall(bw: BW, target: ChannelTarget, run_id: str) -> None:
    """A POST answered 307 and POSTed again: one dispatch, its first answer (307) and its last
    (200) in the outbox; the effect ends when the chain does."""
    done = _run(bw, "channels", run_id, *_inputs(target, "redirect"))
    assert done.returncode == 0, done.stderr[-2000:]
    [fire] = _fire(bw.show(run_id))
    [row] = fire["outbox"]
    assert (row["status"], row["final_status"]) == (307, 200)
    assert row["final_url"].endswith(f"/land?key={run_id}/fire")
    assert fire["evidence"]["responses"][0]["final_status"] == 200


def test_several_dispatches_in_one_attempt_are_named(bw: BW, target: ChannelTarget, run_id: str) -> None:
    """An effect whose page posts a preview, then the real thing: both pass the gate, the
    outcome counts two, and the run warns naming them and suggesting a narrower dispatch=."""
    done = _run(bw, "channels", run_id, *_inputs(target, "twice"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dispatched 2 requests in one attempt" in done.stderr and "/preview?key=" in done.stderr
    assert "dispatch=" in done.stderr
    [fire] = _fire(bw.show(run_id))
    assert fire["evidence"]["dispatches"] == 2


def test_a_dispatch_glob_gates_a_get(bw: BW, target: ChannelTarget, run_id: str) -> None:
    """``dispatch="*/land?*"`` (a URL glob) matches every method: a GET link that lands is held
    like a POST, so a kill after it lands is verified, not replayed."""
    first = _run(bw, "channels-glob", run_id, *_inputs(target, "get-link", die=True))
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    resumed = _run(bw, "channels-glob", run_id)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    crashed = _fire(bw.show(run_id))[0]
    assert [(r["method"], r["channel"]) for r in crashed["outbox"]] == [("GET", "held")]
    assert target.landings(f"{run_id}/fire") == 1


@pytest.mark.parametrize("channel", ["fetch", "api"])
def test_an_action_that_sends_is_warned_or_refused(bw: BW, target: ChannelTarget, run_id: str, channel: str) -> None:
    """An action sending on a channel is warned (and lands); in fail mode it is refused: the run
    fails and the target receives nothing."""
    warned = _run(bw, "channels-in-action", run_id, *_inputs(target, channel))
    assert warned.returncode == 0, warned.stderr[-2000:]
    assert "undeclared side effect" in warned.stderr
    assert target.landings(f"{run_id}/fire") == 1

    refused_id = f"{run_id}-fail"
    refused = _run(bw, "channels-in-action-fail", refused_id, *_inputs(target, channel))
    assert refused.returncode == 1, refused.stderr[-2000:]
    show = bw.show(refused_id)
    assert show["run"]["state"] == "FAILED"
    assert [a["decided_by"] for a in _fire(show)] == ["undeclared_effect"]
    assert target.landings(f"{refused_id}/fire") == 0


def test_a_websocket_message_from_an_action_is_warned_or_refused(bw: BW, target: ChannelTarget, run_id: str) -> None:
    """A WebSocket message an action sends is an undeclared side effect, like a POST: warned
    (and delivered), or in fail mode never delivered, even when it reaches the kit only after
    the action has returned (the action here does not wait for it)."""
    warned = _run(bw, "channels-in-action", run_id, *_inputs(target, "websocket"))
    assert warned.returncode == 0, warned.stderr[-2000:]
    assert "undeclared side effect: WEBSOCKET ws://" in warned.stderr
    assert target.landings(f"{run_id}/fire") == 1

    refused_id = f"{run_id}-fail"
    refused = _run(bw, "channels-in-action-fail", refused_id, *_inputs(target, "websocket"))
    assert refused.returncode in (0, 1), refused.stderr[-2000:]  # FAILED if the guard saw it before the outcome
    assert target.landings(f"{refused_id}/fire") == 0  # the browser is gone: nothing can land later


@pytest.mark.parametrize("channel", ["arm-pagehide", "arm-keepalive"])
def test_a_page_armed_to_send_on_pagehide_sends_once_per_effect_after_a_kill(
    bw: BW, target: ChannelTarget, run_id: str, channel: str
) -> None:
    """A page that sends on every ``pagehide`` (a beacon, a keepalive fetch, armed when it
    loads), SIGKILLed after its effect landed: the resumed pass loads the page again, its
    verifier decides SUCCEEDED, and closing the pass's context sends nothing more (it goes
    offline first). One landing per effect at the target."""
    first = _run(bw, "channels", run_id, *_inputs(target, channel, die=True))
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    assert target.landings(f"{run_id}/fire") == 1
    resumed = _run(bw, "channels", run_id)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    show = bw.show(run_id)
    assert show["run"]["state"] == "SUCCEEDED"
    crashed = _fire(show)[0]
    assert (crashed["state"], crashed["decided_by"]) == ("SUCCEEDED", "verifier")
    assert "PAGEHIDE" in {row["method"] for row in crashed["outbox"] if row["channel"] == "detected"}
    assert not target.wait_for(f"{run_id}/fire", 2, timeout=1.0)  # a late unload send would land now
    assert target.landings(f"{run_id}/fire") == 1


@pytest.mark.parametrize("kill_in", ["effect", "next action"])
def test_a_page_armed_to_send_on_pagehide_sends_once_when_a_verifier_or_an_action_leaves_it(
    bw: BW, target: ChannelTarget, run_id: str, kill_in: str
) -> None:
    """The same page, SIGKILLed after its effect landed (in the effect, or in the action after
    it, which leaves the page): the resumed pass loads the page again, and the effect's
    verifier leaves it (it reads the count on a page of its own), or the effect is skipped as
    done and the next action leaves it. Its unload listeners are removed once its effect is
    done, so leaving it sends nothing: one landing at the target."""
    inputs = _inputs(target, "arm-pagehide", die=kill_in == "effect")
    if kill_in == "next action":
        inputs += ["--input", "die_leaving=true"]
    first = _run(bw, "channels-leaving", run_id, *inputs)
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    assert target.landings(f"{run_id}/fire") == 1
    resumed = _run(bw, "channels-leaving", run_id)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert not target.wait_for(f"{run_id}/fire", 2, timeout=1.0)  # a late unload send would land now
    assert target.landings(f"{run_id}/fire") == 1
    show = bw.show(run_id)
    assert show["run"]["state"] == "SUCCEEDED"
    fire = _fire(show)
    if kill_in == "effect":
        assert (fire[0]["decided_by"], fire[0]["evidence"]["unload_listeners_removed"]) == ("verifier", ["pagehide"])
    else:
        assert [(a["state"], a["decided_by"]) for a in fire] == [("SUCCEEDED", "return")]


def test_a_send_a_timer_fires_between_steps_is_refused_and_reported(bw: BW, target: ChannelTarget, run_id: str) -> None:
    """An effect's click arms a timer that POSTs 400 ms later; the effect returns at once and
    its outcome commit waits for the store (the test holds its write lock), so the timer fires
    between the steps. The send is refused at the route and reported, naming the effect; the
    process is SIGKILLed in the next action and resumed: nothing lands, the run succeeds."""
    proc = bw.start(
        "run",
        FLOW,
        "--flow",
        "channels-timer",
        "--db",
        str(bw.db),
        "--run-id",
        run_id,
        *_inputs(target, "timer", die=True),
        env={"BROWSERWORKER_FAULTS": "before_outcome_commit:fire=stop", "BROWSERWORKER_BUSY_TIMEOUT": "30"},
    )
    _stopped(proc)  # the effect has clicked and returned; its outcome is not journaled yet
    lock = sqlite3.connect(bw.db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    os.kill(proc.pid, signal.SIGCONT)
    landed = target.wait_for(f"{run_id}/fire", 1, timeout=2.0)  # the timer fires at 0.4 s, its send is decided
    lock.execute("ROLLBACK")
    lock.close()
    _, err = proc.communicate(timeout=120)
    assert not landed, "a send fired between steps reached the target"
    assert proc.returncode == -signal.SIGKILL, err[-2000:]
    assert f"a page sent POST {target.url}/land?key=" in err
    assert "after step fire returned, before the next step (refused)" in err
    resumed = _run(bw, "channels-timer", run_id)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert bw.show(run_id)["run"]["state"] == "SUCCEEDED"
    assert target.landings(f"{run_id}/fire") == 0


def test_a_timer_send_between_steps_fails_a_fail_mode_run(bw: BW, target: ChannelTarget, run_id: str) -> None:
    """With ``undeclared_effects="fail"`` the same send between steps, refused, also fails the run."""
    proc = bw.start(
        "run",
        FLOW,
        "--flow",
        "channels-timer-fail",
        "--db",
        str(bw.db),
        "--run-id",
        run_id,
        *_inputs(target, "timer"),
        env={"BROWSERWORKER_FAULTS": "before_outcome_commit:fire=stop", "BROWSERWORKER_BUSY_TIMEOUT": "30"},
    )
    _stopped(proc)
    lock = sqlite3.connect(bw.db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    os.kill(proc.pid, signal.SIGCONT)
    landed = target.wait_for(f"{run_id}/fire", 1, timeout=2.0)
    lock.execute("ROLLBACK")
    lock.close()
    _, err = proc.communicate(timeout=120)
    assert not landed
    assert proc.returncode == 1, err[-2000:]
    show = bw.show(run_id)
    assert show["run"]["state"] == "FAILED"
    assert "between steps" in show["run"]["error"]
    assert target.landings(f"{run_id}/fire") == 0


def test_a_self_closing_popup_in_a_fail_mode_action_fails_the_run(bw: BW, target: ChannelTarget, run_id: str) -> None:
    """A popup an action opens sends a keepalive POST and closes itself: Chromium lets that
    POST out without asking any route, so fail mode cannot keep it back. It sees it all the
    same (the browser's request event), and the run fails, saying it may have been sent."""
    done = _run(bw, "channels-popup-in-action-fail", run_id, *_inputs(target, "popup"))
    assert target.landings(f"{run_id}/fire") == 1  # what the kit cannot refuse (docs/channels.md)
    assert done.returncode == 1, done.stderr[-2000:]
    show = bw.show(run_id)
    assert show["run"]["state"] == "FAILED"
    [fire] = _fire(show)
    assert fire["decided_by"] == "undeclared_effect"
    assert any("/land?key=" in item for item in fire["evidence"].get("not_refused", [])), fire["evidence"]
    assert "possibly sent" in show["run"]["error"]
