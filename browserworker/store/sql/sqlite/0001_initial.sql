-- browserworker schema, version 1.
-- Times are seconds since the epoch (REAL), taken from the store's clock.

CREATE TABLE runs (
    id               TEXT PRIMARY KEY,
    flow_name        TEXT NOT NULL,
    flow_path        TEXT,
    flow_hash        TEXT,
    inputs_json      TEXT NOT NULL,
    secret_fields    TEXT NOT NULL DEFAULT '[]',
    queue            TEXT NOT NULL DEFAULT 'default',
    priority         INTEGER NOT NULL DEFAULT 0,
    state            TEXT NOT NULL,
    owner            TEXT,
    owner_host       TEXT,
    owner_pid        INTEGER,
    owner_pid_start  TEXT,
    lease_epoch      INTEGER NOT NULL DEFAULT 0,
    lease_expires_at REAL,
    owner_stopped_at REAL,
    needs_reconcile  INTEGER NOT NULL DEFAULT 0,
    created_at       REAL NOT NULL,
    not_before       REAL,
    started_at       REAL,
    finished_at      REAL,
    updated_at       REAL NOT NULL,
    error            TEXT
);
CREATE INDEX runs_state ON runs (state, queue, priority, created_at);

-- The journal: one row per attempt of a step.
CREATE TABLE attempts (
    id                  INTEGER PRIMARY KEY,
    run_id              TEXT NOT NULL REFERENCES runs (id),
    step_id             TEXT NOT NULL,
    kind                TEXT NOT NULL CHECK (kind IN ('action', 'effect')),
    attempt_no          INTEGER NOT NULL,
    request_key         TEXT NOT NULL,
    request_fingerprint TEXT NOT NULL,
    state               TEXT NOT NULL,
    lease_epoch         INTEGER NOT NULL,
    worker              TEXT,
    intent_at           REAL NOT NULL,
    dispatched_at       REAL,
    finished_at         REAL,
    result_json         TEXT,
    decided_by          TEXT,
    evidence            TEXT,
    error               TEXT,
    UNIQUE (run_id, step_id, attempt_no)
);
CREATE INDEX attempts_run ON attempts (run_id, step_id, attempt_no);

-- Every request the dispatch gate released, and the response to it (its own commit).
CREATE TABLE outbox (
    id           INTEGER PRIMARY KEY,
    attempt_id   INTEGER NOT NULL REFERENCES attempts (id),
    run_id       TEXT NOT NULL,
    step_id      TEXT NOT NULL,
    method       TEXT NOT NULL,
    url          TEXT NOT NULL,
    released_at  REAL NOT NULL,
    status       INTEGER,
    response_url TEXT,
    headers_json TEXT,
    response_at  REAL,
    failure      TEXT,
    failed_at    REAL
);
CREATE INDEX outbox_attempt ON outbox (attempt_id);

-- Every state transition and decision, for audit and metrics.
CREATE TABLE events (
    id          INTEGER PRIMARY KEY,
    at          REAL NOT NULL,
    run_id      TEXT NOT NULL,
    step_id     TEXT,
    attempt_no  INTEGER,
    worker      TEXT,
    lease_epoch INTEGER,
    kind        TEXT NOT NULL,
    from_state  TEXT,
    to_state    TEXT,
    decision    TEXT,
    detail_json TEXT
);
CREATE INDEX events_run ON events (run_id, id);
