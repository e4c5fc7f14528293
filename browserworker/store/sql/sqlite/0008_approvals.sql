-- browserworker schema, version 8: approvals, a person's yes or no before an effect dispatches.

-- One row per request held for a person: what would leave (masked), its fingerprint, and
-- the decision. A later attempt dispatches only a request whose fingerprint an APPROVED row has.
CREATE TABLE approvals (
    id           INTEGER PRIMARY KEY,
    run_id       TEXT NOT NULL,
    step_id      TEXT NOT NULL,
    attempt_no   INTEGER NOT NULL,  -- the attempt that asked
    request_key  TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,     -- sha256 of method, URL and normalized body
    summary_json TEXT NOT NULL,     -- method, URL, fields/body and headers, secrets masked
    screenshot   TEXT,              -- the page as it was about to send (a PNG path)
    state        TEXT NOT NULL,     -- PENDING, APPROVED, REJECTED, EXPIRED, SUPERSEDED
    worker       TEXT,
    created_at   REAL NOT NULL,
    expires_at   REAL NOT NULL,
    decided_at   REAL,
    decided_by   TEXT,
    reason       TEXT
);
CREATE INDEX approvals_of_step ON approvals (run_id, step_id, id);
CREATE INDEX approvals_pending ON approvals (state, expires_at);
