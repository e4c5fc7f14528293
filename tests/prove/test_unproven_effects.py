"""An effect without proof (no verifier, not idempotent): named when its flow loads and by chaos."""

from __future__ import annotations

from tests.support.bw import BW
from tests.support.paths import FLOWS


def test_an_effect_without_proof_is_named_at_load_and_by_chaos(bw: BW) -> None:
    """A flow whose effect has neither a verifier nor idempotent=True is warned about once when
    the CLI loads it (what a crash leads to: review); chaos's verdict for such an effect whose
    landings nothing counted is "unproven: no verifier", not "ok"."""
    from browserworker.flow import load_flow, unproven_effects
    from browserworker.prove._chaos import UNPROVEN, _verdict

    loaded = load_flow(FLOWS / "place_order_unverified.py")
    [line] = unproven_effects(loaded.flow)
    assert "'submit'" in line and "NEEDS_REVIEW" in line
    assert unproven_effects(load_flow(FLOWS / "place_order.py").flow) == []
    queued = bw.run(
        "enqueue",
        str(FLOWS / "place_order_unverified.py"),
        "--db",
        str(bw.db),
        "--input",
        "base_url=http://127.0.0.1:9",
        "--input",
        "item=tea",
    )
    assert queued.returncode == 0, queued.stderr
    assert queued.stderr.count("warning: effect 'submit'") == 1
    submit = loaded.flow.steps[-1]
    assert _verdict(True, "NEEDS_REVIEW", None, submit) == UNPROVEN
    assert _verdict(True, "SUCCEEDED", 1, submit) == "ok"
    assert _verdict(True, "SUCCEEDED", 2, submit) == "DUPLICATE"
