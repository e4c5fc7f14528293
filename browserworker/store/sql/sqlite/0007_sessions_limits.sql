-- browserworker schema, version 7: saved login sessions, and budgets per limit key.

-- Login sessions: a browser context's storage state saved after a login, encrypted, under the
-- key a flow derives from its inputs; later runs with that key start from it.
CREATE TABLE login_sessions (
    key          TEXT PRIMARY KEY,
    state        BLOB,              -- the encrypted storage state (NULL: none saved yet)
    key_id       TEXT,              -- which encryption key sealed it (a fingerprint, not the key)
    flow_name    TEXT,
    saved_by     TEXT,              -- the run that saved it
    created_at   REAL NOT NULL,
    saved_at     REAL,
    used_at      REAL,
    max_age      REAL,             -- seconds the saving flow reuses it for (its session_max_age)
    uses         INTEGER NOT NULL DEFAULT 0,
    version      INTEGER NOT NULL DEFAULT 0,
    login_owner  TEXT,              -- the run logging in for this key now
    login_until  REAL               -- until when its claim on the login holds
);

-- Budgets: a limit key's concurrency and rate across the fleet, and a pause after a 429/503.
CREATE TABLE limits (
    key          TEXT PRIMARY KEY,
    concurrency  INTEGER,           -- runs of the key LEASED or RUNNING at once (NULL: no limit)
    rate         REAL,              -- claims per minute (NULL: no limit)
    tokens       REAL,              -- the rate's token bucket
    refilled_at  REAL,
    paused_until REAL,              -- no claims of the key before this (Retry-After)
    pause_reason TEXT,
    updated_at   REAL NOT NULL
);

-- Each run's limit key (its flow's name unless the flow derives one from its inputs).
ALTER TABLE runs ADD COLUMN limit_key TEXT;
UPDATE runs SET limit_key = flow_name;
CREATE INDEX runs_limit_live ON runs (limit_key) WHERE state IN ('LEASED', 'RUNNING');
