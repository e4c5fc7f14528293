-- Named queries of the SQL stores. Each starts with a `-- name: NAME` line.
-- Fenced writes carry `lease_epoch = :epoch` (and, where a dispatch margin applies,
-- `lease_expires_at >= :now + :margin`) in their WHERE clause: zero rows means the
-- caller no longer owns the run.

-- name: insert_run
INSERT INTO runs (id, flow_name, flow_path, flow_hash, inputs_json, secret_fields, queue, priority, state,
                  created_at, not_before, updated_at)
VALUES (:id, :flow_name, :flow_path, :flow_hash, :inputs_json, :secret_fields, :queue, :priority, 'QUEUED',
        :now, :not_before, :now)

-- name: get_run
SELECT * FROM runs WHERE id = :id

-- name: list_runs
SELECT * FROM runs ORDER BY created_at DESC, id LIMIT :limit

-- name: list_runs_in_state
SELECT * FROM runs WHERE state = :state ORDER BY created_at DESC, id LIMIT :limit

-- name: claim_run
-- Take a run that is queued, whose lease expired (beyond the skew tolerance), or whose
-- owner was proven dead at epoch :takeover_epoch. Bumps the epoch: every write of the
-- previous owner is fenced off from this moment.
UPDATE runs
SET state = 'LEASED', owner = :owner, owner_host = :host, owner_pid = :pid, owner_pid_start = :pid_start,
    lease_epoch = lease_epoch + 1, lease_expires_at = :now + :ttl,
    owner_stopped_at = CASE
        WHEN state = 'QUEUED' THEN owner_stopped_at
        WHEN lease_epoch = :takeover_epoch THEN :now
        ELSE MIN(COALESCE(lease_expires_at, :now), :now)
    END,
    needs_reconcile = CASE WHEN state = 'QUEUED' THEN needs_reconcile ELSE 1 END,
    updated_at = :now
WHERE id = :id
  AND (
        state = 'QUEUED'
     OR (state IN ('LEASED', 'RUNNING') AND lease_expires_at < :now - :skew)
     OR (state IN ('LEASED', 'RUNNING') AND lease_epoch = :takeover_epoch)
  )

-- name: heartbeat
UPDATE runs SET lease_expires_at = :now + :ttl, updated_at = :now
WHERE id = :id AND lease_epoch = :epoch AND state IN ('LEASED', 'RUNNING') AND lease_expires_at >= :now

-- name: set_run_state
UPDATE runs
SET state = :state, error = :error, updated_at = :now,
    started_at = CASE WHEN :state = 'RUNNING' THEN COALESCE(started_at, :now) ELSE started_at END,
    finished_at = CASE WHEN :state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'NEEDS_REVIEW') THEN :now ELSE finished_at END,
    needs_reconcile = CASE WHEN :state IN ('SUCCEEDED', 'FAILED', 'CANCELLED') THEN 0 ELSE needs_reconcile END,
    owner = CASE WHEN :state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'NEEDS_REVIEW', 'QUEUED') THEN NULL ELSE owner END,
    lease_expires_at = CASE WHEN :state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'NEEDS_REVIEW', 'QUEUED') THEN NULL
                            ELSE lease_expires_at END
WHERE id = :id AND lease_epoch = :epoch

-- name: clear_reconcile
UPDATE runs SET needs_reconcile = 0, updated_at = :now WHERE id = :id AND lease_epoch = :epoch

-- name: insert_attempt
-- Fenced by epoch and, for effects, by the dispatch margin.
INSERT INTO attempts (run_id, step_id, kind, attempt_no, request_key, request_fingerprint, state,
                      lease_epoch, worker, intent_at)
SELECT :run_id, :step_id, :kind,
       (SELECT COALESCE(MAX(attempt_no), 0) + 1 FROM attempts WHERE run_id = :run_id AND step_id = :step_id),
       :request_key, :fingerprint, :state, :epoch, :worker, :now
FROM runs
WHERE id = :run_id AND lease_epoch = :epoch AND lease_expires_at >= :now + :margin

-- name: get_attempt
SELECT * FROM attempts WHERE id = :id

-- name: attempts_of_run
SELECT * FROM attempts WHERE run_id = :run_id ORDER BY id

-- name: latest_attempt
SELECT * FROM attempts WHERE run_id = :run_id AND step_id = :step_id ORDER BY attempt_no DESC LIMIT 1

-- name: mark_dispatched
-- The dispatch gate's fenced commit: only while the lease has the margin left.
UPDATE attempts SET dispatched_at = COALESCE(dispatched_at, :now)
WHERE id = :attempt_id AND state = 'INTENT'
  AND EXISTS (SELECT 1 FROM runs
              WHERE runs.id = attempts.run_id AND runs.lease_epoch = :epoch
                AND runs.lease_expires_at >= :now + :margin)

-- name: insert_outbox
INSERT INTO outbox (attempt_id, run_id, step_id, method, url, released_at)
VALUES (:attempt_id, :run_id, :step_id, :method, :url, :now)

-- name: record_response
UPDATE outbox SET status = :status, response_url = :response_url, headers_json = :headers_json, response_at = :now
WHERE id = :id AND response_at IS NULL

-- name: record_request_failed
UPDATE outbox SET failure = :failure, failed_at = :now WHERE id = :id AND response_at IS NULL AND failure IS NULL

-- name: outbox_of_attempt
SELECT * FROM outbox WHERE attempt_id = :attempt_id ORDER BY id

-- name: finish_attempt
UPDATE attempts
SET state = :state, finished_at = :now, result_json = :result_json, decided_by = :decided_by,
    evidence = :evidence, error = :error
WHERE id = :attempt_id AND state = :from_state
  AND EXISTS (SELECT 1 FROM runs WHERE runs.id = attempts.run_id AND runs.lease_epoch = :epoch)

-- name: insert_event
INSERT INTO events (at, run_id, step_id, attempt_no, worker, lease_epoch, kind, from_state, to_state, decision,
                    detail_json)
VALUES (:now, :run_id, :step_id, :attempt_no, :worker, :epoch, :kind, :from_state, :to_state, :decision,
        :detail_json)

-- name: events_of_run
SELECT * FROM events WHERE run_id = :run_id ORDER BY id

-- name: queued_depth
SELECT COUNT(*) AS depth FROM runs WHERE queue = :queue AND state = 'QUEUED'

-- name: get_queue
SELECT * FROM queues WHERE name = :name

-- name: set_queue
INSERT INTO queues (name, max_depth) VALUES (:name, :max_depth)
ON CONFLICT (name) DO UPDATE SET max_depth = excluded.max_depth

-- name: list_queues
SELECT * FROM queues ORDER BY name

-- name: next_queued
-- The next claimable run of one queue: highest priority, then oldest.
SELECT id FROM runs
WHERE queue = :queue AND state = 'QUEUED' AND (not_before IS NULL OR not_before <= :now)
ORDER BY priority DESC, created_at, id
LIMIT 1

-- name: expired_leases
SELECT * FROM runs WHERE state IN ('LEASED', 'RUNNING') AND lease_expires_at < :now - :skew
ORDER BY lease_expires_at LIMIT :limit

-- name: requeue_expired
-- The reclaimer: an expired lease goes back to QUEUED (or to review once it was lost too
-- often), flagged for reconciliation; the epoch is bumped so the old owner is fenced off.
UPDATE runs
SET state = :state, owner = NULL, lease_expires_at = NULL, lease_epoch = lease_epoch + 1,
    owner_stopped_at = MIN(lease_expires_at, :now), needs_reconcile = 1, lease_losses = lease_losses + 1,
    error = :error, finished_at = CASE WHEN :state = 'NEEDS_REVIEW' THEN :now ELSE finished_at END,
    updated_at = :now
WHERE id = :id AND lease_epoch = :epoch AND state IN ('LEASED', 'RUNNING') AND lease_expires_at < :now - :skew

-- name: release_run
-- A stopping worker hands a run back at a step boundary: QUEUED at once, no expiry wait.
UPDATE runs
SET state = 'QUEUED', owner = NULL, lease_expires_at = NULL, lease_epoch = lease_epoch + 1, updated_at = :now
WHERE id = :id AND lease_epoch = :epoch AND state IN ('LEASED', 'RUNNING')

-- name: cancel_queued
UPDATE runs SET state = 'CANCELLED', finished_at = :now, updated_at = :now, owner = NULL, lease_expires_at = NULL
WHERE id = :id AND state IN ('QUEUED', 'NEEDS_REVIEW')

-- name: request_cancel
UPDATE runs SET cancel_requested = 1, updated_at = :now WHERE id = :id AND state IN ('LEASED', 'RUNNING')

-- name: requeue_reviewed
UPDATE runs SET state = 'QUEUED', error = NULL, finished_at = NULL, updated_at = :now, lease_losses = 0
WHERE id = :id AND state = 'NEEDS_REVIEW'

-- name: fail_reviewed
UPDATE runs SET state = 'FAILED', error = :error, finished_at = :now, updated_at = :now
WHERE id = :id AND state = 'NEEDS_REVIEW'

-- name: resolve_attempt
UPDATE attempts
SET state = :state, finished_at = :now, result_json = :result_json, decided_by = :decided_by, evidence = :evidence,
    error = NULL
WHERE id = :attempt_id AND state IN ('UNKNOWN', 'INTENT')
  AND EXISTS (SELECT 1 FROM runs WHERE runs.id = attempts.run_id AND runs.state = 'NEEDS_REVIEW')

-- name: register_worker
INSERT INTO workers (id, host, pid, queues, concurrency, started_at, last_heartbeat, health)
VALUES (:id, :host, :pid, :queues, :concurrency, :now, :now, 'healthy')

-- name: worker_heartbeat
UPDATE workers SET last_heartbeat = :now, health = CASE WHEN health = 'stopped' THEN health ELSE 'healthy' END
WHERE id = :id

-- name: mark_worker
UPDATE workers SET health = :health, stopped_at = CASE WHEN :health = 'stopped' THEN :now ELSE stopped_at END
WHERE id = :id

-- name: list_workers
SELECT * FROM workers ORDER BY started_at DESC

-- name: runs_needing_review
SELECT * FROM runs WHERE state = 'NEEDS_REVIEW' ORDER BY finished_at, id LIMIT :limit

-- name: count_by_state
SELECT queue, state, COUNT(*) AS n, MIN(created_at) AS oldest FROM runs GROUP BY queue, state
