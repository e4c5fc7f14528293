-- SQLite's overrides of shared queries (queries.sql), by name: only where SQLite must differ.
-- SQLite's fragments are all empty: BEGIN IMMEDIATE serialises every writer, so no fence
-- needs a row lock (store/manager.py).

-- name: ops_completion_ages
-- How long each run that SUCCEEDED in (:lo, :hi] took from its queue to confirmed completion.
-- `+state` (a unary plus: SQLite then uses no index for that term) makes the planner read the
-- finished_at range of runs_finished, not every SUCCEEDED run of runs_ops.
SELECT queue, finished_at - CASE WHEN not_before > created_at THEN not_before ELSE created_at END AS waited
FROM runs WHERE finished_at > :lo AND finished_at <= :hi AND +state = 'SUCCEEDED'
