"""`make bench`: every benchmark, both sides of each comparison in one invocation, alternating.

Prints a markdown table, writes figures to benchmarks/results/latest.json and a chart to
benchmarks/results/latest.png, and describes the machine. Not part of the test suite.
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import agent_tools  # noqa: E402
import browser_bench  # noqa: E402
import claims  # noqa: E402
import control_plane  # noqa: E402
import session_reuse  # noqa: E402
from figures import abba, load_range, loaded, pair_ratios, spread, verdict  # noqa: E402

from browserworker.runtime._browser import find_chromium  # noqa: E402
from browserworker.sandbox.testing import start_sandbox  # noqa: E402

RESULTS = HERE / "results"


def machine() -> dict[str, Any]:
    import psutil

    chromium = find_chromium(headless=True)  # what every side launches (BrowserSettings.discover())
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "sqlite": sqlite3.sqlite_version,
        "chromium": chromium,
        "load_avg_at_start": os.getloadavg(),
        "pythondontwritebytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }


def precompile() -> None:
    """Byte-compile the package and these scripts, as an installed wheel is. Some machines set
    PYTHONDONTWRITEBYTECODE (this one does), and both sides of (a) and (e) import browserworker:
    without this, each start-up would compile the same sources again."""
    import compileall

    for folder in (HERE.parent / "browserworker", HERE, HERE.parent / "tests" / "flows"):
        compileall.compile_dir(str(folder), quiet=1)


_START = time.monotonic()


def say(text: str) -> None:
    print(f"[bench {time.monotonic() - _START:4.0f}s] {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py",
        description=__doc__.strip().splitlines()[0],
        epilog="Takes 9-13 minutes on a 2-CPU machine (the PostgreSQL section "
        "7-9 more); progress goes to stderr with elapsed seconds.",
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="Also run the PostgreSQL section (ours on the PG store against procrastinate and "
        "PgQueuer; needs the server of $BROWSERWORKER_BENCH_PG, default "
        "postgresql://postgres@127.0.0.1:5432).",
    )
    parser.add_argument(
        "--sessions-only",
        action="store_true",
        help="Run only (f), the login session benchmark; writes benchmarks/results/sessions.{json,md}.",
    )
    parser.add_argument(
        "--agent-only",
        action="store_true",
        help="Run only (g), the agent tools' round trip; writes benchmarks/results/agent.{json,md}.",
    )
    parser.add_argument(
        "--concurrency-only",
        action="store_true",
        help="Run only (e), concurrent flows on one Chromium; writes benchmarks/results/concurrency.{json,md}.",
    )
    parser.add_argument(
        "--postgres-only",
        action="store_true",
        help="Run only the PostgreSQL section; writes benchmarks/results/postgres.{json,md}.",
    )
    args = parser.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    precompile()
    out: dict[str, Any] = {"machine": machine()}
    if args.postgres_only:
        return postgres_only(out)
    if args.sessions_only:
        return sessions_only(out)
    if args.agent_only:
        return agent_only(out)
    if args.concurrency_only:
        return concurrency_only(out)
    say("raw SQLite commit rate (WAL, synchronous=FULL)")
    out["raw_commits_per_s"] = control_plane.raw_commit_rate(Path(tempfile.mkdtemp()) / "raw.db")
    say("(b) control plane: ours x1, x2 processes; Huey; DBOS (alternating)")
    cp: dict[str, list[dict[str, Any]]] = {"ours_1": [], "ours_2": [], "huey": [], "dbos": []}
    sides: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("ours_1", lambda: control_plane.ours(1, 3000)),
        ("huey", lambda: control_plane.huey(3000)),
        ("ours_2", lambda: control_plane.ours(2, 3000)),
        ("dbos", lambda: control_plane.dbos(150)),
    ]
    for rep in range(3):
        for key, measure in abba(sides, rep):
            cp[key].append(loaded(measure))
    out["control_plane"] = {k: _median_of(v, "runs_per_s") for k, v in cp.items()}
    out["control_plane_detail"] = cp
    say("(c) claim latency by backlog")
    out["claims"] = loaded(lambda: [claims.claim_latency(n) for n in (100, 10_000, 100_000)])
    with tempfile.TemporaryDirectory() as tmp:
        shop = start_sandbox(Path(tmp) / "sandbox.db")
        try:
            say("(a) ten-step flow vs plain Playwright")
            out["ten_steps"] = loaded(lambda: browser_bench.ten_steps(shop.url))
            say("(d) recovery after SIGKILL between effects")
            out["recovery"] = [
                loaded(lambda: browser_bench.recovery(shop.url, reps=3)),
                loaded(lambda: browser_bench.recovery(shop.url, reps=3, remote=True)),
            ]
            say("(e) concurrency 1/4/8 on one Chromium vs plain Playwright")
            out["concurrency"] = loaded(lambda: browser_bench.concurrency(shop.url))
            say("(f) login + effect flow with and without a reused login session")
            out["sessions"] = loaded(lambda: session_reuse.session_reuse(shop))
            say("(g) agent tools through MCP vs the same Playwright calls")
            out["agent"] = loaded(lambda: agent_tools.agent_tools(shop.url))
        finally:
            shop.stop()
    (RESULTS / "latest.json").write_text(json.dumps(out, indent=2, default=str))
    table = render(out)
    (RESULTS / "latest.md").write_text(table)
    # (e), (f) and (g) have files of their own too (a one-line run rewrites them): the latest of each
    _write_line(out, "concurrency", render_concurrency, "concurrency")
    _write_line(out, "sessions", session_reuse.render, "sessions")
    _write_line(out, "agent", agent_tools.render, "agent")
    chart(out, RESULTS / "latest.png")
    print(table)
    if args.postgres:  # its own files (the performance page shows both tables)
        return postgres_only({"machine": out["machine"]})
    say("done")
    return 0


def _median_of(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The row whose ``key`` is the median (with an even count, the upper middle row carrying
    the mean of the two middle values, not the better one); rows without ``key`` (a peer that
    failed) are left out."""
    good = sorted((r for r in rows if key in r), key=lambda r: r[key])
    if not good:
        return rows[0] if rows else {}
    middle = good[len(good) // 2]
    if len(good) % 2:
        return middle
    return {**middle, key: (good[len(good) // 2 - 1][key] + middle[key]) / 2}


def _one_line(
    out: dict[str, Any],
    key: str,
    title: str,
    measure: Callable[[Any], Any],
    render_line: Callable[[Any], str],
    name: str,
) -> int:
    """One browser line alone against a sandbox of its own, in results/NAME.{json,md}."""
    with tempfile.TemporaryDirectory() as tmp:
        shop = start_sandbox(Path(tmp) / "sandbox.db")
        try:
            say(title)
            out[key] = loaded(lambda: measure(shop))
        finally:
            shop.stop()
    print(_write_line(out, key, render_line, name))
    say("done")
    return 0


def _write_line(out: dict[str, Any], key: str, render_line: Callable[[Any], str], name: str) -> str:
    """Line ``key`` of ``out`` (with its machine) in results/NAME.{json,md}; the table written."""
    (RESULTS / f"{name}.json").write_text(json.dumps({"machine": out["machine"], key: out[key]}, indent=2, default=str))
    table = "\n".join([_machine_line(out["machine"]), "", _HEADER, _RULE, render_line(out[key])]) + "\n"
    (RESULTS / f"{name}.md").write_text(table)
    return table


def sessions_only(out: dict[str, Any]) -> int:
    """``--sessions-only``: (f) alone, in results/sessions.{json,md}."""
    title = "(f) login + effect flow with and without a reused login session"
    return _one_line(out, "sessions", title, session_reuse.session_reuse, session_reuse.render, "sessions")


def agent_only(out: dict[str, Any]) -> int:
    """``--agent-only``: (g) alone, in results/agent.{json,md}."""
    title = "(g) agent tools through MCP vs the same Playwright calls"
    return _one_line(out, "agent", title, lambda shop: agent_tools.agent_tools(shop.url), agent_tools.render, "agent")


def concurrency_only(out: dict[str, Any]) -> int:
    """``--concurrency-only``: (e) alone, in results/concurrency.{json,md}."""
    title = "(e) concurrency 1/4/8 on one Chromium vs plain Playwright"
    return _one_line(
        out, "concurrency", title, lambda shop: browser_bench.concurrency(shop.url), render_concurrency, "concurrency"
    )


def postgres_only(out: dict[str, Any]) -> int:
    """``--postgres-only``: the PostgreSQL section alone, in results/postgres.{json,md}."""
    out["postgres"] = postgres()
    (RESULTS / "postgres.json").write_text(json.dumps(out, indent=2, default=str))
    table = _machine_line(out["machine"]) + "\n" + render_postgres(out["postgres"])
    (RESULTS / "postgres.md").write_text(table)
    print(table)
    say("done")
    return 0


def _guarded(measure: Callable[[], Any]) -> Any:
    """``measure()``, or what stopped it (our PG store missing, a peer failing) as ``{"error": ...}``."""
    try:
        return measure()
    except Exception as exc:  # noqa: BLE001 - a benchmark side that fails is reported, not fatal
        return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:160]}


def postgres(jobs: int = 3000, reps: int = 5) -> dict[str, Any]:
    """The PostgreSQL section: (b) ours x1/x2 and the peers' drains (alternating, ABBA, medians),
    idle claim latency of each, (c) ours by backlog, (d) ours' recovery; each in a fresh database."""
    import pg_control_plane
    import pg_peers

    out: dict[str, Any] = {
        "server": pg_peers.server_version(),
        "promises": pg_peers.PROMISES,
        "jobs": jobs,
        "raw_commits_per_s": pg_peers.raw_commit_rate(),
    }
    say(
        "(pg-b) control plane on PostgreSQL: ours x1, x2; procrastinate c=8 x1, x2, c=64; PgQueuer x1, x2 (alternating)"
    )
    sides: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("ours_1", lambda: _guarded(lambda: pg_control_plane.ours_pg(1, jobs))),
        ("procrastinate_8", lambda: pg_peers.drain("procrastinate", jobs, 8)),
        ("pgqueuer", lambda: pg_peers.drain("pgqueuer", jobs, 10)),
        ("ours_2", lambda: _guarded(lambda: pg_control_plane.ours_pg(2, jobs))),
        ("procrastinate_8_x2", lambda: pg_peers.drain("procrastinate", jobs, 8, workers=2)),
        ("pgqueuer_x2", lambda: pg_peers.drain("pgqueuer", jobs, 10, workers=2)),
        ("procrastinate_64", lambda: pg_peers.drain("procrastinate", jobs, 64)),
    ]
    detail: dict[str, list[dict[str, Any]]] = {key: [] for key, _ in sides}
    for rep in range(reps):
        for key, measure in abba(sides, rep):
            detail[key].append(loaded(measure))
    out["control_plane"] = {
        k: _median_of(v, "runs_per_s" if k.startswith("ours") else "jobs_per_s") for k, v in detail.items()
    }
    out["control_plane_detail"] = detail
    say("(pg-b) statements and round trips per run (counted, not timed)")
    out["statements"] = _guarded(pg_control_plane.statements_pg)
    say("(pg-c) idle claim latency: ours, procrastinate, PgQueuer; ours by backlog 100/10k/100k")
    out["idle"] = {
        "ours": loaded(lambda: _guarded(lambda: pg_control_plane.claim_latency_pg(0))),
        **{p: loaded(lambda p=p: pg_peers.idle_latency(p)) for p in pg_peers.PEERS},
    }
    out["claims"] = loaded(
        lambda: [_guarded(lambda n=n: pg_control_plane.claim_latency_pg(n)) for n in (100, 10_000, 100_000)]
    )
    say("(pg-d) recovery after SIGKILL of a worker holding leases")
    out["recovery"] = [
        loaded(lambda: _guarded(lambda: pg_control_plane.recovery_pg(remote=False))),
        loaded(lambda: _guarded(lambda: pg_control_plane.recovery_pg(remote=True))),
    ]
    return out


def _rate(row: dict[str, Any], key: str) -> str:
    return f"{row[key]:,.0f}/s" if key in row else f"failed ({row.get('error', '?')})"


#: the peers' drains each of our rows is compared with: ours with 1 process, ours with 2
_PG_PEERS = {
    "ours_1": (
        ("procrastinate_8", "procrastinate c=8"),
        ("procrastinate_64", "procrastinate c=64"),
        ("pgqueuer", "PgQueuer (batch 10)"),
    ),
    "ours_2": (("procrastinate_8_x2", "procrastinate c=8 x2"), ("pgqueuer_x2", "PgQueuer (batch 10) x2")),
}


def _paired(detail: dict[str, list[dict[str, Any]]], ours: str, peers: list[str]) -> list[float]:
    """Ours over the best of ``peers`` in each repetition (drains seconds apart share the machine's
    load more than drains minutes apart): a ratio per repetition where every side measured."""
    out = []
    for i, row in enumerate(detail[ours]):
        best = max((detail[k][i].get("jobs_per_s", 0.0) for k in peers if i < len(detail[k])), default=0.0)
        if "runs_per_s" in row and best:
            out.append(row["runs_per_s"] / best)
    return out


def _cpu(row: dict[str, Any], key: str) -> str:
    return f" ({row[key]:.2f} ms CPU)" if key in row else ""


#: the targets of pg-b: one process's runs/s; two processes against PgQueuer's one process
PG_ONE_PROCESS = 1500.0
#: (a): ours over plain Playwright's time; (e): ours over plain's runs/min, and memory
A_TARGET = 1.05
E_RUNS = 0.95
E_MEMORY = 1.05


def _pg_drain_rows(pg: dict[str, Any]) -> list[str]:
    cp, detail = pg["control_plane"], pg["control_plane_detail"]
    st = pg.get("statements", {})
    sent = (
        f", {st['statements_per_run']:.1f} statements and {st['round_trips_per_run']:.2f} round trips per run"
        if "statements_per_run" in st
        else ""
    )
    lines = []
    for key, label in (("ours_1", "1 process"), ("ours_2", "2 processes")):
        ours, peers = cp[key], _PG_PEERS[key]
        against = ", ".join(
            f"{name} {_rate(cp[k], 'jobs_per_s')}{_cpu(cp[k], 'worker_cpu_ms_per_job')}" for k, name in peers
        )
        rows = [r for k in [key, *(k for k, _ in peers)] for r in detail[k]]
        if "runs_per_s" not in ours:
            lines.append(
                f"| pg-b | control plane on PostgreSQL, {label} | {_rate(ours, 'runs_per_s')} | {against} | - "
                f"| see docs | no |"
            )
            continue
        procrastinate = [k for k, _ in peers if k.startswith("procrastinate")]
        vs_procrastinate = _paired(detail, key, procrastinate)
        vs_pgqueuer = _paired(detail, key, ["pgqueuer"])
        runs = [r["runs_per_s"] for r in detail[key] if "runs_per_s" in r]
        best = max(cp[k].get("jobs_per_s", 0.0) for k in procrastinate)
        pgq = cp["pgqueuer"].get("jobs_per_s")
        ratios = f"{ours['runs_per_s'] / best:.2f}x procrastinate ({spread(vs_procrastinate)})" if best else "-"
        if pgq:
            ratios += f", {ours['runs_per_s'] / pgq:.2f}x PgQueuer x1 ({spread(vs_pgqueuer)})"
        if key == "ours_1":
            target = f">= {PG_ONE_PROCESS:,.0f} runs/s, full journal"
            met = verdict(runs, lambda v: v >= PG_ONE_PROCESS, what="repetitions")
            measured = f"{ours['runs_per_s']:,.0f} runs/s (repetitions {min(runs):,.0f}-{max(runs):,.0f})"
        else:
            target = ">= PgQueuer's one process, full journal"
            met = verdict(vs_pgqueuer, lambda v: v >= 1.0, fmt="{:.3f}x")
            measured = f"{ours['runs_per_s']:,.0f} runs/s"
        lines.append(
            f"| pg-b | control plane on PostgreSQL, {label} ({ours['concurrency']} runs in flight each, full journal, "
            f"{ours['commits_per_run']:.2f} commits/run{sent if key == 'ours_1' else ''}), {pg['jobs']:,} runs, "
            f"median of {len(detail[key])}, {load_range(rows)} | {measured}"
            f"{_cpu(ours, 'worker_cpu_ms_per_run')} | {against}, as many worker processes (worker CPU per job) | "
            f"{ratios} | {target} | {met} |"
        )
    return lines


def _ms(row: dict[str, Any]) -> str:
    return f"{row['p50_ms']:.2f}/{row['p99_ms']:.2f} ms" if "p50_ms" in row else f"failed ({row.get('error', '?')})"


def _pg_claim_rows(pg: dict[str, Any]) -> list[str]:
    idle = pg["idle"]
    ours = idle["ours"]
    lines = [
        f"| pg-c | idle claim latency, enqueue -> claimed, p50/p99 ({ours.get('samples', '?')} runs, real worker; "
        f"{load_range([ours, *(idle[p] for p in ('procrastinate', 'pgqueuer'))])}; one run per side, no pairs) | "
        f"{_ms(ours)} | procrastinate {_ms(idle['procrastinate'])}, PgQueuer {_ms(idle['pgqueuer'])} "
        f"(enqueue -> job started) | - | p50 < 10 ms | {'yes' if ours.get('p50_ms', 1e9) < 10 else 'no'} |"
    ]
    c = {r.get("backlog"): r for r in pg["claims"]}
    if 100 in c and 100_000 in c and "p50_ms" in c[100] and "p50_ms" in c[100_000]:
        ratio = c[100_000]["p50_ms"] / c[100]["p50_ms"]
        lines.append(
            f"| pg-c | claim_next latency p50/p99 by backlog ({load_range(pg['claims'])}; one measurement per "
            f"backlog) | 100: {_ms(c[100])}; 10k: {_ms(c[10_000])}; "
            f"100k: {_ms(c[100_000])} | backlog of 100 | {ratio:.2f}x | 100k p50 <= 1.5x | "
            f"{'yes' if ratio <= 1.5 else 'no'} |"
        )
    else:
        lines.append(
            f"| pg-c | claim_next latency by backlog | {_ms(pg['claims'][0])} | - | - | 100k p50 <= 1.5x | no |"
        )
    return lines


def render_postgres(pg: dict[str, Any]) -> str:
    """The PostgreSQL section's rows and what each peer promises, in markdown."""
    lines = [
        "",
        f"PostgreSQL section: {pg['server']}, same server for every side, a fresh database each.",
        "",
        "| # | what | ours | compared with | ratio | target | met |",
        "|---|---|---|---|---|---|---|",
        *_pg_drain_rows(pg),
        *_pg_claim_rows(pg),
    ]
    for r in pg["recovery"]:
        if "recovery_s" not in r:
            lines.append(
                f"| pg-d | recovery after SIGKILL of a worker holding leases | failed ({r.get('error', '?')}) "
                "| - | - | <= TTL + skew + 1 s | no |"
            )
            continue
        ph = r["phases_median_s"]
        lines.append(
            f"| pg-d | recovery after SIGKILL of a worker holding {r['held']} leases, {r['path']}, median "
            f"of {len(r['all_s'])} (after the kill: requeued {ph['requeued_s']:.2f} s, claimed again "
            f"{ph['claimed_again_s']:.2f} s, finished; {spread(r['all_s'], '{:.1f} s', what='repetitions')}; "
            f"{load_range(r)}) | {r['recovery_s']:.1f} s | lease TTL {r['ttl_s']:.0f} s, "
            f"skew {r['skew_s']:.1f} s | - | <= {r['target_s']:.1f} s | "
            f"{verdict(r['all_s'], lambda v, t=r['target_s']: v <= t, what='repetitions')} |"
        )
    lines += [
        "",
        f"Raw commit rate of this server (one-row INSERT transactions, one connection): "
        f"{pg['raw_commits_per_s']:,.0f} commits/s.",
        "",
        "What the peers promise (from their documentation and code):",
        "",
    ]
    for peer, promise in pg["promises"].items():
        lines.append(f"- **{peer}**: " + "; ".join(f"{k}: {v}" for k, v in promise.items()) + ".")
    return "\n".join(lines) + "\n"


def _machine_line(m: dict[str, Any]) -> str:
    return (
        f"Machine: {m['cpus']} CPUs, {m['memory_gb']} GiB, Python {m['python']}, SQLite {m['sqlite']}, "
        f"{m['platform']}; Chromium {m['chromium']}; load average at start "
        f"{tuple(round(x, 2) for x in m['load_avg_at_start'])}; {m['when']}; bytecode precompiled "
        f"(PYTHONDONTWRITEBYTECODE={'1' if m.get('pythondontwritebytecode') else 'unset'})."
    )


_HEADER = "| # | what | ours | compared with | ratio | target | met |"
_RULE = "|---|---|---|---|---|---|---|"


def render(o: dict[str, Any]) -> str:
    cp = o["control_plane"]
    t = o["ten_steps"]
    a_pairs = pair_ratios(t.get("ours_each", []), t.get("plain_each", []))
    lines = [
        _machine_line(o["machine"]),
        "",
        _HEADER,
        _RULE,
        f"| a | 10-step flow (6 actions, 4 effects), `browserworker run`, median of {t['reps']}, {load_range(t)} "
        f"| {t['ours_s']:.2f} s | plain Playwright {t['plain_s']:.2f} s{_ten_hooks_part(t)} | {t['ratio']:.2f}x ({spread(a_pairs)}) "
        f"| <= {A_TARGET:.2f}x | {verdict(a_pairs, lambda v: v <= A_TARGET, fmt='{:.3f}x')} |",
    ]
    detail = o["control_plane_detail"]
    for key, label in (("ours_1", "1 process"), ("ours_2", "2 processes")):
        ours = cp[key]["runs_per_s"]
        huey, dbos = cp["huey"].get("runs_per_s"), cp["dbos"].get("runs_per_s")
        runs = [r["runs_per_s"] for r in detail[key]]
        best_peer = [
            max(h.get("runs_per_s", 0.0), d.get("runs_per_s", 0.0))
            for h, d in zip(detail["huey"], detail["dbos"], strict=False)
        ]
        pairs = pair_ratios(runs, best_peer)
        lines.append(
            f"| b | control plane, {label} (64 runs in flight each), synchronous=FULL "
            f"({cp[key]['commits_per_run']:.2f} commits/run), median of {len(runs)}, "
            f"{load_range(detail[key] + detail['huey'] + detail['dbos'])} | "
            f"{ours:,.0f} runs/s ({spread(runs, '{:,.0f}', what='repetitions')}) | Huey {huey:,.0f}/s, "
            f"DBOS {dbos:,.0f}/s | {ours / huey:.1f}x Huey ({spread(pair_ratios(runs, [h['runs_per_s'] for h in detail['huey']]), '{:.1f}x')}), "
            f"{ours / dbos:.0f}x DBOS | >= 2,000/s and >= peers | "
            f"{verdict([min(r / 2000, p) for r, p in zip(runs, pairs, strict=False)], lambda v: v >= 1)} |"
        )
    c = {r["backlog"]: r for r in o["claims"]}
    ratio = c[100_000]["p50_ms"] / c[100]["p50_ms"]
    lines.append(
        f"| c | claim latency p50/p99 | 100: {c[100]['p50_ms']:.2f}/{c[100]['p99_ms']:.2f} ms; 10k: "
        f"{c[10_000]['p50_ms']:.2f}/{c[10_000]['p99_ms']:.2f} ms; 100k: {c[100_000]['p50_ms']:.2f}/"
        f"{c[100_000]['p99_ms']:.2f} ms ({load_range(o['claims'])}; one measurement per backlog, no pairs) "
        f"| backlog of 100 | {ratio:.2f}x | 100k p50 <= 1.5x | {'yes' if ratio <= 1.5 else 'no'} |"
    )
    for r in o["recovery"]:
        lines.append(
            f"| d | recovery after SIGKILL between effects, {r['path']}, median of {len(r['all_s'])} "
            f"({spread(r['all_s'], '{:.1f} s', what='repetitions')}; {load_range(r)}) | {r['recovery_s']:.1f} s | "
            f"lease TTL {r['ttl_s']:.0f} s | - | <= TTL + 2 s | "
            f"{verdict(r['all_s'], lambda v, t=r['target_s']: v <= t, what='repetitions')} |"
        )
    lines.append(render_concurrency(o["concurrency"]))
    if "sessions" in o:
        lines.append(session_reuse.render(o["sessions"]))
    if "agent" in o:
        lines.append(agent_tools.render(o["agent"]))
    lines += [
        "",
        f"Raw SQLite commit rate on this disk (WAL, synchronous=FULL): {o['raw_commits_per_s']:,.0f} commits/s "
        "(the ceiling without group commit).",
    ]
    return "\n".join(lines) + "\n"


def render_concurrency(rows: list[dict[str, Any]]) -> str:
    """The table rows of (e), one per concurrency level."""
    lines = []
    for r in rows:
        # runs/min over runs/min in each pair: plain's seconds over ours
        pairs = pair_ratios(r["plain_seconds"], r["ours_seconds"])
        memory = pair_ratios(r.get("ours_peak_pss_mb_each", []), r.get("plain_peak_pss_mb_each", []))
        lines.append(
            f"| e | {r['concurrency']} concurrent flows on one Chromium ({r['runs']} runs, first start to "
            f"last finish, median of {r['reps']}; PSS from {r['memory_reps']} separate "
            f"drains of {r['memory_runs']}; {load_range(r)}) | {r['ours_runs_per_min']:.0f} runs/min, "
            f"{r['ours_peak_pss_mb']:.0f} MB PSS | plain {r['plain_runs_per_min']:.0f} runs/min, "
            f"{r['plain_peak_pss_mb']:.0f} MB (with Playwright's own flags only: "
            f"{r['plain_playwright_flags_runs_per_min']:.0f} runs/min, "
            f"{r.get('plain_playwright_flags_reps', r['reps'])} drains){_hooks_part(r)} | {r['throughput_ratio']:.2f}x runs "
            f"({spread(pairs)}), {r['memory_ratio']:.2f}x memory ({spread(memory)}) (CPU "
            f"{r['ours_cpu_s_per_run']:.2f} vs {r['plain_cpu_s_per_run']:.2f} s/run, {r['cpu_ratio']:.2f}x) | "
            f">= {E_RUNS:.2f}x, memory <= {E_MEMORY:.2f}x | runs: {verdict(pairs, lambda v: v >= E_RUNS, fmt='{:.3f}x')}; "
            f"memory: {verdict(memory, lambda v: v <= E_MEMORY, fmt='{:.3f}x')} |"
        )
    return "\n".join(lines)


def _ten_hooks_part(t: dict[str, Any]) -> str:
    """(a)'s third side, the plain script with the kit's hooks: its time, it over plain (the
    hooks' share) and ours over it (the kit's own), each with its pairs."""
    if "hooks_each" not in t:
        return ""
    hooks = pair_ratios(t["hooks_each"], t["plain_each"])
    own = pair_ratios(t["ours_each"], t["hooks_each"])
    return (
        f"; with the kit's hooks (route, socket route, request events, renderer stopped; no journal) "
        f"{t['hooks_s']:.2f} s, {t['hooks_s'] / t['plain_s']:.2f}x plain ({spread(hooks)}): ours "
        f"{t['ours_s'] / t['hooks_s']:.2f}x of it ({spread(own)})"
    )


def _hooks_part(r: dict[str, Any]) -> str:
    """(e)'s third side, plain Playwright with the kit's hooks: its runs/min, ours over it (the
    kit's own share) and it over plain (the hooks' share), each with its pairs."""
    if "hooks_seconds" not in r:
        return ""
    own = pair_ratios(r["hooks_seconds"], r["ours_seconds"])
    hooks = pair_ratios(r["plain_seconds"], r["hooks_seconds"])
    hooks_rpm = r["hooks_runs_per_min"]
    return (
        f"; plain with the kit's hooks (route, socket route, request events, renderers stopped; no journal) "
        f"{hooks_rpm:.0f} runs/min, {hooks_rpm / r['plain_runs_per_min']:.2f}x plain ({spread(hooks)}): "
        f"ours {r['ours_runs_per_min'] / hooks_rpm:.2f}x of it ({spread(own)})"
    )


def chart(o: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    cp = o["control_plane"]
    names = ["ours x1", "ours x2", "Huey", "DBOS"]
    values = [
        cp["ours_1"]["runs_per_s"],
        cp["ours_2"]["runs_per_s"],
        cp["huey"].get("runs_per_s", 0),
        cp["dbos"].get("runs_per_s", 0),
    ]
    axes[0].bar(names, values, color=["#2a6", "#2a6", "#888", "#888"])
    axes[0].set_title("(b) control plane, runs/s")
    c = o["claims"]
    axes[1].bar([f"{r['backlog']:,}" for r in c], [r["p50_ms"] for r in c], label="p50")
    axes[1].bar(
        [f"{r['backlog']:,}" for r in c],
        [r["p99_ms"] - r["p50_ms"] for r in c],
        bottom=[r["p50_ms"] for r in c],
        label="p99",
        alpha=0.5,
    )
    axes[1].set_title("(c) claim latency (ms) by backlog")
    axes[1].legend()
    e = o["concurrency"]
    x = [r["concurrency"] for r in e]
    axes[2].plot(x, [r["ours_runs_per_min"] for r in e], "o-", label="ours")
    axes[2].plot(x, [r["plain_runs_per_min"] for r in e], "s--", label="plain Playwright")
    axes[2].plot(x, [r["plain_playwright_flags_runs_per_min"] for r in e], "^:", label="plain, Playwright's flags only")
    axes[2].set_title("(e) runs/min by concurrency")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
