-- PostgreSQL's one-statement form of a shared query (queries.sql), for a batch's calls of it
-- (store/coalesce.py): named as the query it stands for, with each of that query's parameters
-- given as an array of the calls' values, in the calls' order (`unnest` pairs them up again).
-- Each row gets the same conditions (its fence) as the single statement's. A write returns
-- every row it changed or inserted (an update the row's id, an insert the call's key: its
-- first parameter; and, where the store reads the row back, the row), so a call whose row is
-- not returned changed nothing; a read returns its call's key AS batch_key beside the columns
-- the single read gives. The Tx uses one only when the batch's keys are distinct
-- (store/postgres/_queries.py); otherwise, and on SQLite, each call is its own statement.
-- Arrays are typed with CAST(... AS type[]), not `::` (parameters are `:name`); they are sent
-- in binary.

-- name: claim_queued_by_id
UPDATE runs
SET state = 'LEASED', owner = t.owner, owner_host = t.host, owner_pid = t.pid, owner_pid_start = t.pid_start,
    lease_epoch = runs.lease_epoch + 1, lease_expires_at = t.now + t.ttl, updated_at = t.now
FROM unnest(CAST(:id AS text[]), CAST(:owner AS text[]), CAST(:host AS text[]), CAST(:pid AS integer[]),
            CAST(:pid_start AS text[]), CAST(:now AS double precision[]), CAST(:ttl AS double precision[]))
     AS t(id, owner, host, pid, pid_start, now, ttl)
WHERE runs.id = t.id AND runs.state = 'QUEUED'
RETURNING runs.*

-- name: start_run
UPDATE runs
SET state = 'RUNNING', error = t.error, updated_at = t.now, started_at = COALESCE(runs.started_at, t.now)
FROM unnest(CAST(:id AS text[]), CAST(:epoch AS integer[]), CAST(:error AS text[]), CAST(:now AS double precision[]),
            CAST(:from_state AS text[]))
     AS t(id, epoch, error, now, from_state)
WHERE runs.id = t.id AND runs.lease_epoch = t.epoch AND (runs.state = t.from_state OR t.from_state IS NULL)
RETURNING runs.*

-- name: end_run
UPDATE runs
SET state = t.state, error = t.error, updated_at = t.now, finished_at = t.now, owner = NULL, lease_expires_at = NULL,
    needs_reconcile = CASE WHEN t.state = 'NEEDS_REVIEW' THEN runs.needs_reconcile ELSE 0 END
FROM unnest(CAST(:id AS text[]), CAST(:epoch AS integer[]), CAST(:state AS text[]), CAST(:error AS text[]),
            CAST(:now AS double precision[]), CAST(:from_state AS text[]))
     AS t(id, epoch, state, error, now, from_state)
WHERE runs.id = t.id AND runs.lease_epoch = t.epoch AND (runs.state = t.from_state OR t.from_state IS NULL)
RETURNING runs.*

-- name: heartbeat
UPDATE runs SET lease_expires_at = t.now + t.ttl, updated_at = t.now
FROM unnest(CAST(:id AS text[]), CAST(:epoch AS integer[]), CAST(:now AS double precision[]),
            CAST(:ttl AS double precision[]))
     AS t(id, epoch, now, ttl)
WHERE runs.id = t.id AND runs.lease_epoch = t.epoch AND runs.state IN ('LEASED', 'RUNNING')
  AND runs.lease_expires_at >= {clock}
RETURNING runs.id

-- name: record_response
UPDATE outbox SET status = t.status, response_url = t.response_url, headers_json = t.headers_json, response_at = t.now
FROM unnest(CAST(:id AS bigint[]), CAST(:status AS integer[]), CAST(:response_url AS text[]),
            CAST(:headers_json AS text[]), CAST(:now AS double precision[]))
     AS t(id, status, response_url, headers_json, now)
WHERE outbox.id = t.id AND outbox.response_at IS NULL
RETURNING outbox.id

-- name: finish_attempt
UPDATE attempts
SET state = t.state, finished_at = t.now, result_json = t.result_json, decided_by = t.decided_by,
    evidence = t.evidence, error = t.error,
    dispatched_at = CASE WHEN t.dispatched THEN COALESCE(attempts.dispatched_at, t.now) ELSE attempts.dispatched_at END
FROM unnest(CAST(:attempt_id AS bigint[]), CAST(:from_state AS text[]), CAST(:state AS text[]),
            CAST(:now AS double precision[]), CAST(:epoch AS integer[]), CAST(:result_json AS text[]),
            CAST(:decided_by AS text[]), CAST(:evidence AS text[]), CAST(:error AS text[]),
            CAST(:dispatched AS boolean[]))
     AS t(attempt_id, from_state, state, now, epoch, result_json, decided_by, evidence, error, dispatched)
WHERE attempts.id = t.attempt_id AND attempts.state = t.from_state
  AND EXISTS (SELECT 1 FROM runs WHERE runs.id = attempts.run_id AND runs.lease_epoch = t.epoch {share_run})
RETURNING attempts.id, attempts.dispatched_at

-- name: mark_dispatched
UPDATE attempts SET dispatched_at = COALESCE(attempts.dispatched_at, t.now)
FROM unnest(CAST(:attempt_id AS bigint[]), CAST(:now AS double precision[]), CAST(:epoch AS integer[]),
            CAST(:margin AS double precision[]))
     AS t(attempt_id, now, epoch, margin)
WHERE attempts.id = t.attempt_id AND attempts.state = 'INTENT'
  AND EXISTS (SELECT 1 FROM runs
              WHERE runs.id = attempts.run_id AND runs.lease_epoch = t.epoch
                AND runs.lease_expires_at >= {clock} + t.margin {share_run})
RETURNING attempts.id

-- name: insert_attempt
-- The attempt's number is read in the statement (as next_attempt_no reads it: the statement
-- does not see the rows it inserts, and a batch's runs are distinct), so this form takes no
-- :attempt_no and returns it (Tx.insert_numbered_each). Fenced as the single insert, on the
-- run row it joins (FOR SHARE).
INSERT INTO attempts (run_id, step_id, kind, attempt_no, request_key, request_fingerprint, state,
                      lease_epoch, worker, intent_at)
SELECT t.run_id, t.step_id, t.kind,
       (SELECT COALESCE(MAX(a.attempt_no), 0) + 1 FROM attempts AS a WHERE a.run_id = t.run_id AND a.step_id = t.step_id),
       t.request_key, t.fingerprint, t.state, t.epoch, t.worker, t.now
FROM unnest(CAST(:run_id AS text[]), CAST(:step_id AS text[]), CAST(:kind AS text[]), CAST(:request_key AS text[]),
            CAST(:fingerprint AS text[]), CAST(:state AS text[]), CAST(:epoch AS integer[]), CAST(:worker AS text[]),
            CAST(:now AS double precision[]), CAST(:margin AS double precision[]))
     AS t(run_id, step_id, kind, request_key, fingerprint, state, epoch, worker, now, margin)
JOIN runs ON runs.id = t.run_id AND runs.lease_epoch = t.epoch AND runs.lease_expires_at >= {clock} + t.margin
{share_run}
RETURNING attempts.id, attempts.run_id, attempts.attempt_no

-- name: insert_outbox
INSERT INTO outbox (attempt_id, run_id, step_id, method, url, released_at, channel)
SELECT * FROM unnest(CAST(:attempt_id AS bigint[]), CAST(:run_id AS text[]), CAST(:step_id AS text[]),
                     CAST(:method AS text[]), CAST(:url AS text[]), CAST(:now AS double precision[]),
                     CAST(:channel AS text[]))
RETURNING outbox.id, outbox.attempt_id

-- name: effect_boundary
SELECT t.run_id AS batch_key, runs.cancel_requested AS run_cancel_requested, attempts.*
FROM unnest(CAST(:run_id AS text[]), CAST(:step_id AS text[])) AS t(run_id, step_id)
JOIN runs ON runs.id = t.run_id
LEFT JOIN attempts ON attempts.id = (
    SELECT a.id FROM attempts AS a WHERE a.run_id = t.run_id AND a.step_id = t.step_id ORDER BY a.attempt_no DESC LIMIT 1)
