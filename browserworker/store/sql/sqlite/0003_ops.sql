-- browserworker schema, version 3: indexes for operations (metrics, status, health, restore).
-- They keep the `-- ops` queries cheap on databases with 100k+ runs: each reads an index
-- range or scans a covering index, never the tables themselves.

-- runs by state and queue, queue depth and age (covering).
CREATE INDEX runs_ops ON runs (state, queue, created_at, not_before);
-- queue-age histograms, read incrementally: runs started / finished since a watermark.
CREATE INDEX runs_started ON runs (started_at, queue, created_at, not_before);
CREATE INDEX runs_finished ON runs (finished_at);

-- lease expiries (totals and windows) and the detections that start a reconciliation.
CREATE INDEX events_kind ON events (kind, decision, at);

-- every classification as UNKNOWN, and every reconciliation of an UNKNOWN attempt.
CREATE INDEX events_transition ON events (to_state, kind, from_state, decision);

-- attempts that are UNKNOWN now (unresolved ambiguity).
CREATE INDEX attempts_unknown ON attempts (finished_at) WHERE state = 'UNKNOWN';
