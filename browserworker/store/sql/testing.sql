-- Named queries of browserworker.store.testing: moving times into the past instead of
-- sleeping in tests. Shared by every dialect; nothing else calls them.

-- name: testing_backdate_run
-- Move one time column of a run :seconds into the past (:column names it).
UPDATE runs
SET lease_expires_at = lease_expires_at - CASE WHEN :column = 'lease_expires_at' THEN :seconds ELSE 0 END,
    not_before = not_before - CASE WHEN :column = 'not_before' THEN :seconds ELSE 0 END,
    created_at = created_at - CASE WHEN :column = 'created_at' THEN :seconds ELSE 0 END,
    started_at = started_at - CASE WHEN :column = 'started_at' THEN :seconds ELSE 0 END,
    finished_at = finished_at - CASE WHEN :column = 'finished_at' THEN :seconds ELSE 0 END
WHERE id = :id

-- name: testing_backdate_attempts
-- Move finished_at of the attempts with id :id (any, if NULL) and state :state (any, if NULL).
UPDATE attempts SET finished_at = finished_at - :seconds
WHERE (id = :id OR :id IS NULL) AND (state = :state OR :state IS NULL)

-- name: testing_backdate_events
UPDATE events SET at = at - :seconds WHERE run_id = :run_id AND kind = :kind

-- name: testing_backdate_worker
UPDATE workers SET last_heartbeat = last_heartbeat - :seconds WHERE id = :id

-- name: testing_forget_lease
-- A run back in the queue with no trace of its lease (no event, same epoch): as a database
-- edited by hand would have it.
UPDATE runs SET state = 'QUEUED', owner = NULL, lease_expires_at = NULL WHERE id = :id

-- name: testing_backdate_limit
-- Move a limit key's pause end and its bucket's last refill :seconds into the past.
UPDATE limits SET paused_until = paused_until - :seconds, refilled_at = refilled_at - :seconds WHERE key = :key

-- name: testing_backdate_console_sessions
-- Move the expiry of every console session :seconds into the past.
UPDATE console_sessions SET expires_at = expires_at - :seconds

-- name: testing_backdate_approvals
-- Move the expiry of run :run_id's approvals :seconds into the past.
UPDATE approvals SET expires_at = expires_at - :seconds WHERE run_id = :run_id
