-- browserworker schema, version 4: fewer index writes on the hot path.
-- A run's happy path (claim, RUNNING, intent, dispatch, outcome, SUCCEEDED) used to rewrite
-- every index of `runs` on each state change and four b-trees per event row. Partial
-- indexes hold only the rows their queries look for, so the common transitions skip them;
-- every read-only ops query still reads an index, never a table (tests/ops/test_metrics.py).

-- claims and queue depth: only QUEUED runs. (runs_ops, by state, stays: the counts read it.)
DROP INDEX runs_claim;
CREATE INDEX runs_claim ON runs (queue, priority DESC, created_at, id, not_before) WHERE state = 'QUEUED';

-- leases that can expire: only LEASED and RUNNING runs.
DROP INDEX runs_expiry;
CREATE INDEX runs_live ON runs (lease_expires_at) WHERE state IN ('LEASED', 'RUNNING');

-- the UNIQUE (run_id, step_id, attempt_no) constraint already indexes these columns.
DROP INDEX attempts_run;

-- events the ops queries count: classifications as / reconciliations of UNKNOWN, and lost
-- leases (found expired, or taken over at expiry or from a dead owner). Routine events
-- (claims, intents, dispatches, successes) are in neither.
DROP INDEX events_transition;
CREATE INDEX events_unknown ON events (kind, to_state, from_state, decision, at)
    WHERE from_state = 'UNKNOWN' OR to_state = 'UNKNOWN';
DROP INDEX events_kind;
CREATE INDEX events_lost ON events (kind, decision, at)
    WHERE kind = 'lease_expired' OR decision IN ('lease_expired', 'owner_dead');
