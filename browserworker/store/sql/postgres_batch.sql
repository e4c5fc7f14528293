-- PostgreSQL's one-statement form of a shared query (queries.sql), for a batch's calls of it
-- (store/coalesce.py): named as the query it stands for, it reads the calls' parameters from
-- one JSON array of them, :calls (one object a call, encoded in C: cheaper for the client than
-- an array a parameter), as the rows of `json_to_recordset` whose columns are the query's
-- parameters it takes, typed, the key of a call's row first. Each row gets the same conditions
-- (its fence) as the single statement's. A write returns every row it changed or inserted (an
-- update the row's id, an insert the call's key; and, where the store reads the row back, the
-- row), so a call whose row is not returned changed nothing; a read returns its call's key AS
-- batch_key beside the columns the single read gives. The Tx uses one only when the batch's
-- keys are distinct (store/postgres/_queries.py); otherwise, and on SQLite, each call is its
-- own statement.

-- name: claim_queued_by_id
UPDATE runs
SET state = CASE WHEN t.start = 1 AND runs.lease_epoch = 0 AND runs.needs_reconcile = 0 THEN 'RUNNING' ELSE 'LEASED' END,
    started_at = CASE WHEN t.start = 1 AND runs.lease_epoch = 0 AND runs.needs_reconcile = 0 THEN t.now
                      ELSE runs.started_at END,
    owner = t.owner, owner_host = t.host, owner_pid = t.pid, owner_pid_start = t.pid_start,
    lease_epoch = runs.lease_epoch + 1, lease_expires_at = t.now + t.ttl, updated_at = t.now
FROM json_to_recordset(CAST(:calls AS json))
     AS t(id text, owner text, host text, pid integer, pid_start text, now double precision,
          ttl double precision, start integer)
WHERE runs.id = t.id AND runs.state = 'QUEUED'
RETURNING runs.*

-- name: start_run
UPDATE runs
SET state = 'RUNNING', error = t.error, updated_at = t.now, started_at = COALESCE(runs.started_at, t.now)
FROM json_to_recordset(CAST(:calls AS json))
     AS t(id text, epoch integer, error text, now double precision, from_state text)
WHERE runs.id = t.id AND runs.lease_epoch = t.epoch AND (runs.state = t.from_state OR t.from_state IS NULL)
RETURNING runs.*

-- name: end_run
UPDATE runs
SET state = t.state, error = t.error, updated_at = t.now, finished_at = t.now, owner = NULL, lease_expires_at = NULL,
    needs_reconcile = CASE WHEN t.state = 'NEEDS_REVIEW' THEN runs.needs_reconcile ELSE 0 END
FROM json_to_recordset(CAST(:calls AS json))
     AS t(id text, epoch integer, state text, error text, now double precision, from_state text)
WHERE runs.id = t.id AND runs.lease_epoch = t.epoch AND (runs.state = t.from_state OR t.from_state IS NULL)
RETURNING runs.*

-- name: heartbeat
UPDATE runs SET lease_expires_at = t.now + t.ttl, updated_at = t.now
FROM json_to_recordset(CAST(:calls AS json))
     AS t(id text, epoch integer, now double precision, ttl double precision)
WHERE runs.id = t.id AND runs.lease_epoch = t.epoch AND runs.state IN ('LEASED', 'RUNNING')
  AND runs.lease_expires_at >= {clock}
RETURNING runs.id

-- name: record_response
UPDATE outbox SET status = t.status, response_url = t.response_url, headers_json = t.headers_json, response_at = t.now
FROM json_to_recordset(CAST(:calls AS json))
     AS t(id bigint, status integer, response_url text, headers_json text, now double precision)
WHERE outbox.id = t.id AND outbox.response_at IS NULL
RETURNING outbox.id

-- name: finish_attempt
UPDATE attempts
SET state = t.state, finished_at = t.now, result_json = t.result_json, decided_by = t.decided_by,
    evidence = t.evidence, error = t.error,
    dispatched_at = CASE WHEN t.dispatched THEN COALESCE(attempts.dispatched_at, t.now) ELSE attempts.dispatched_at END
FROM json_to_recordset(CAST(:calls AS json))
     AS t(attempt_id bigint, from_state text, state text, now double precision, epoch integer, result_json text,
          decided_by text, evidence text, error text, dispatched boolean)
WHERE attempts.id = t.attempt_id AND attempts.state = t.from_state
  AND EXISTS (SELECT 1 FROM runs WHERE runs.id = attempts.run_id AND runs.lease_epoch = t.epoch {share_run})
RETURNING attempts.id, attempts.dispatched_at

-- name: mark_dispatched
UPDATE attempts SET dispatched_at = COALESCE(attempts.dispatched_at, t.now)
FROM json_to_recordset(CAST(:calls AS json))
     AS t(attempt_id bigint, now double precision, epoch integer, margin double precision)
WHERE attempts.id = t.attempt_id AND attempts.state = 'INTENT'
  AND EXISTS (SELECT 1 FROM runs
              WHERE runs.id = attempts.run_id AND runs.lease_epoch = t.epoch
                AND runs.lease_expires_at >= {clock} + t.margin {share_run})
RETURNING attempts.id

-- name: insert_attempt
-- The attempt's number is read in the statement (as next_attempt_no reads it: the statement
-- does not see the rows it inserts, and a batch's runs are distinct), so this form takes no
-- :attempt_no and returns it (Tx.insert_numbered_each). Fenced as the single insert: each
-- call's run row read by its id, under FOR SHARE (a sub-select with a locking clause is not
-- merged into the join: one index probe a call, whatever the statistics say).
INSERT INTO attempts (run_id, step_id, kind, attempt_no, request_key, request_fingerprint, state,
                      lease_epoch, worker, intent_at)
SELECT t.run_id, t.step_id, t.kind,
       (SELECT COALESCE(MAX(a.attempt_no), 0) + 1 FROM attempts AS a
        WHERE a.run_id = t.run_id AND a.step_id = t.step_id),
       t.request_key, t.fingerprint, t.state, t.epoch, t.worker, t.now
FROM json_to_recordset(CAST(:calls AS json))
     AS t(run_id text, step_id text, kind text, request_key text, fingerprint text, state text, epoch integer,
          worker text, now double precision, margin double precision)
CROSS JOIN LATERAL (SELECT 1 FROM runs
                    WHERE runs.id = t.run_id AND runs.lease_epoch = t.epoch
                      AND runs.lease_expires_at >= {clock} + t.margin {share_run}) AS fence
RETURNING attempts.id, attempts.run_id, attempts.attempt_no

-- name: insert_outbox
INSERT INTO outbox (attempt_id, run_id, step_id, method, url, released_at, channel)
SELECT t.attempt_id, t.run_id, t.step_id, t.method, t.url, t.now, t.channel
FROM json_to_recordset(CAST(:calls AS json))
     AS t(attempt_id bigint, run_id text, step_id text, method text, url text, now double precision, channel text)
RETURNING outbox.id, outbox.attempt_id

-- name: effect_boundary
-- Read outside a transaction: each call's rows by index, whatever the statistics say (a
-- sub-select with OFFSET or LIMIT is not merged into the join).
SELECT t.run_id AS batch_key, r.run_cancel_requested, a.*
FROM json_to_recordset(CAST(:calls AS json)) AS t(run_id text, step_id text)
CROSS JOIN LATERAL (SELECT runs.cancel_requested AS run_cancel_requested FROM runs
                    WHERE runs.id = t.run_id OFFSET 0) AS r
LEFT JOIN LATERAL (SELECT attempts.* FROM attempts WHERE attempts.run_id = t.run_id AND attempts.step_id = t.step_id
                   ORDER BY attempts.attempt_no DESC LIMIT 1) AS a ON true
