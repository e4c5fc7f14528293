-- browserworker schema, version 2: the worker fleet.

ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN lease_losses INTEGER NOT NULL DEFAULT 0;

DROP INDEX runs_state;
-- claim order: priority first, then age; only QUEUED runs are scanned.
CREATE INDEX runs_claim ON runs (queue, state, priority DESC, created_at, id);
CREATE INDEX runs_expiry ON runs (state, lease_expires_at);

CREATE TABLE workers (
    id             TEXT PRIMARY KEY,
    host           TEXT NOT NULL,
    pid            INTEGER NOT NULL,
    queues         TEXT NOT NULL,
    concurrency    INTEGER NOT NULL,
    started_at     REAL NOT NULL,
    last_heartbeat REAL NOT NULL,
    health         TEXT NOT NULL DEFAULT 'healthy',
    stopped_at     REAL
);

CREATE TABLE queues (
    name       TEXT PRIMARY KEY,
    max_depth  INTEGER
);
