-- browserworker's PostgreSQL schema, version 4 (SQLite's version 9): the console's sign-ins, kept server-side.

-- One row per signed-in console session. The cookie carries the session's id, signed; the
-- row keeps only the id's SHA-256, who signed in, the role, which token it was made with
-- (the first 16 hex digits of that token's hash: a changed token ends its sessions) and
-- when it ends. Signing out deletes the row.
CREATE TABLE console_sessions (
    id_hash    TEXT PRIMARY KEY,  -- sha256 of the session id the signed cookie holds
    name       TEXT NOT NULL,     -- the name given at sign-in (what the journal records)
    role       TEXT NOT NULL,     -- operator or viewer
    token_key  TEXT NOT NULL,     -- the start of the sha256 of the token signed in with
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX console_sessions_of_name ON console_sessions (name, role);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
