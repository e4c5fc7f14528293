-- PostgreSQL's overrides of shared queries (queries.sql), by name: only where PostgreSQL must
-- differ. (The shared queries are portable; this dialect's other differences are its
-- fragments, FOR SHARE / FOR UPDATE / FOR UPDATE SKIP LOCKED, and its clock: store/postgres.py.)

-- name: end_stuck_sessions
-- A session of this store (same database, same application_name: this schema's) with a
-- transaction that has written, whose statement has waited on its client (ClientRead) or which
-- has sat idle in its transaction for more than :stuck seconds. A client frozen between a
-- COPY's start and its end, or inside a pipeline before its Sync, waits "active" in ClientRead
-- where neither idle_in_transaction_session_timeout nor statement_timeout ends it (PostgreSQL
-- before 17 has no transaction_timeout), and keeps the row locks of the runs it was writing.
-- Only sessions this role may end are asked to.
SELECT COUNT(pg_terminate_backend(pid)) AS ended FROM pg_stat_activity
WHERE datname = current_database() AND application_name = current_setting('application_name')
  AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL
  AND (state = 'idle in transaction' OR (state = 'active' AND wait_event = 'ClientRead'))
  AND state_change < now() - make_interval(secs => :stuck)
  AND pg_has_role(usesysid, 'MEMBER')
