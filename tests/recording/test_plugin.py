"""The pytest plugin, tested with pytester: the replay fixture, record modes, artifacts on failure,
and launch settings from pytest-playwright."""

from __future__ import annotations

import json

import pytest

from tests.support.paths import FLOWS, RECORDINGS


@pytest.mark.browser
def test_replay_fixture_and_artifacts_kept_only_for_failed_tests(pytester: pytest.Pytester) -> None:
    """`replay` replays a committed recording offline; a failing test gets the replay report in its
    output and keeps its traces under --output; a passing one keeps nothing; a missing recording
    (record mode none) fails with the command that would create it."""
    pytester.makepyfile(
        test_flows="""
        def test_ok(replay):
            result = replay("place-order-api")
            assert result.ok and result.state == "SUCCEEDED"

        def test_fails(replay):
            result = replay("place-order-api")
            assert result.state == "FAILED"

        def test_missing(replay):
            replay("nope", flow="flows/nope.py", record_inputs={"item": "tea"})
    """
    )
    out = pytester.path / "results"
    done = pytester.runpytest_subprocess(
        "--bw-recordings", str(RECORDINGS), "--output", str(out), "-p", "no:cacheprovider"
    )
    done.assert_outcomes(passed=1, failed=2)
    text = done.stdout.str()
    assert "browserworker replays" in text and "matches the recording" in text
    assert "no recording 'nope'" in text
    assert "browserworker run flows/nope.py --record" in text and "--input item=tea" in text
    assert "--bw-record=once" in text
    kept = sorted(p.name for p in out.iterdir())
    assert len(kept) == 1 and "test_fails" in kept[0]
    assert list((out / kept[0]).rglob("*.zip")), "the failed test's traces are kept"


@pytest.mark.browser
@pytest.mark.slow
def test_record_once_records_what_is_missing_then_none_replays_it(pytester: pytest.Pytester) -> None:
    """--bw-record=once records a missing recording against the live sandbox and replays it; a
    later --bw-record=none run replays the same recording without starting the sandbox."""
    pytester.makepyfile(
        test_once=f"""
        import pytest

        def test_api(replay, request):
            result = replay("api-once", flow={str(FLOWS / "place_order_api.py")!r},
                            record_inputs=lambda: {{"base_url": request.getfixturevalue("sandbox").url,
                                                   "item": "tea"}})
            assert result.ok, result.report()
    """
    )
    recs = pytester.path / "recs"
    first = pytester.runpytest_subprocess("--bw-record=once", "--bw-recordings", str(recs), "-p", "no:cacheprovider")
    first.assert_outcomes(passed=1)
    meta = json.loads((recs / "api-once" / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["flow"]["name"] == "place-order-api"
    pytester.makeconftest("""
        import pytest

        @pytest.fixture(scope="session")
        def sandbox():
            pytest.fail("the sandbox was asked for: a replay-only run must not need it")
    """)
    second = pytester.runpytest_subprocess("--bw-record=none", "--bw-recordings", str(recs), "-p", "no:cacheprovider")
    second.assert_outcomes(passed=1)
    assert json.loads((recs / "api-once" / "meta.json").read_text())["recorded_at"] == meta["recorded_at"]


def test_launch_settings_come_from_pytest_playwright(pytester: pytest.Pytester) -> None:
    """--headed and --browser-channel (pytest-playwright's options) decide how replays launch Chromium."""
    pytester.makepyfile(
        test_settings="""
        def test_settings(bw_browser_settings):
            assert bw_browser_settings.headless is False
            assert bw_browser_settings.launch_options["channel"] == "chrome-beta"
            assert bw_browser_settings.executable_path is None
    """
    )
    done = pytester.runpytest_subprocess("--headed", "--browser-channel", "chrome-beta", "-p", "no:cacheprovider")
    done.assert_outcomes(passed=1)
