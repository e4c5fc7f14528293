-- Named queries of the SQL stores, shared by every dialect. Each starts with a `-- name: NAME`
-- line; parameters are `:name`. A dialect's own file (sqlite.sql) replaces a query by name
-- where its behaviour must differ, and fills the `{share_run}`, `{lock_row}` and
-- `{skip_locked}` fragments and the `{clock}` of lease decisions (store/connector.py; what each fence rests on: store/manager.py).
-- Fenced writes carry `lease_epoch = :epoch` (and, where a dispatch margin applies,
-- `lease_expires_at >= {clock} + :margin`) in their WHERE clause, or in a sub-select of the run
-- ending in `{share_run}`: zero rows means the caller no longer owns the run.
-- Portable SQL only (PostgreSQL 15 prepares every statement here): CASE, not two-argument
-- MIN/MAX; a parameter that may be NULL is compared before it is tested (`state = :x OR :x IS
-- NULL`: PostgreSQL types a parameter at its first use).
-- No write says RETURNING: SQLite runs such a statement into a temporary b-tree and reads
-- it back, which costs more than the write's own index updates (a run's transition
-- took ~50 µs with it, ~20 without). A write that must return its row names the read of
-- that row by its key (get_run, dispatched_at: Tx.changed_each): SQLite counts the rows the
-- update changed, then runs the read in the same transaction; PostgreSQL, where each
-- statement is work for the server, adds the read's columns to the update as RETURNING.

-- name: insert_run
INSERT INTO runs (id, flow_name, flow_path, flow_hash, inputs_json, secret_fields, queue, priority, state,
                  created_at, not_before, updated_at, limit_key)
VALUES (:id, :flow_name, :flow_path, :flow_hash, :inputs_json, :secret_fields, :queue, :priority, 'QUEUED',
        :now, :not_before, :now, :limit_key)

-- name: get_run
SELECT * FROM runs WHERE id = :id

-- name: run_fence
-- What a fenced transition checks when its single update matched nothing: the run's state
-- and epoch, nothing else.
SELECT state, lease_epoch FROM runs WHERE id = :id {lock_row}

-- name: lock_run
-- A run that the same transaction then changes (claim_run, release, cancel, resolve).
SELECT * FROM runs WHERE id = :id {lock_row}

-- name: lock_run_if_free
-- The reclaimer's lock of a run it requeues: none (no row) while another transaction holds
-- the row (its owner writing under the lease): the reclaimer passes it by instead of waiting.
SELECT id FROM runs WHERE id = :id {skip_locked}

-- name: run_lease
-- Why a fenced write matched nothing: the run's epoch, owner and expiry now.
SELECT lease_epoch, owner, lease_expires_at FROM runs WHERE id = :id

-- name: run_cancel_requested
SELECT cancel_requested FROM runs WHERE id = :id

-- name: list_runs
SELECT * FROM runs ORDER BY created_at DESC, id LIMIT :limit

-- name: list_runs_in_state
SELECT * FROM runs WHERE state = :state ORDER BY created_at DESC, id LIMIT :limit

-- name: _run_filter
-- (A fragment of the console's run queries, not a query.) Each filter NULL matches every run;
-- :text is a run id, the start of one (:prefix, LIKE-escaped with '!'), or a request key.
(state = :state OR :state IS NULL) AND (flow_name = :flow OR :flow IS NULL) AND (queue = :queue OR :queue IS NULL)
AND (id = :text OR id LIKE :prefix ESCAPE '!' OR id IN (SELECT run_id FROM attempts WHERE request_key = :text)
     OR :text IS NULL)

-- name: search_runs
-- One page of the runs that pass the filter, newest first.
SELECT * FROM runs WHERE {_run_filter} ORDER BY created_at DESC, id LIMIT :limit OFFSET :offset

-- name: count_runs
SELECT COUNT(*) AS n FROM runs WHERE {_run_filter}

-- name: run_flows
-- The flows that have runs (the console's filter choices).
SELECT flow_name, COUNT(*) AS n FROM runs GROUP BY flow_name ORDER BY flow_name

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
        WHEN lease_expires_at < :now THEN lease_expires_at
        ELSE :now
    END,
    needs_reconcile = CASE WHEN state = 'QUEUED' THEN needs_reconcile ELSE 1 END,
    updated_at = :now
WHERE id = :id
  AND (
        state = 'QUEUED'
     OR (state IN ('LEASED', 'RUNNING') AND lease_expires_at < {clock} - :skew)
     OR (state IN ('LEASED', 'RUNNING') AND lease_epoch = :takeover_epoch)
  )

-- name: heartbeat
UPDATE runs SET lease_expires_at = :now + :ttl, updated_at = :now
WHERE id = :id AND lease_epoch = :epoch AND state IN ('LEASED', 'RUNNING') AND lease_expires_at >= {clock}

-- name: set_run_state
UPDATE runs
SET state = :state, error = :error, updated_at = :now,
    started_at = CASE WHEN :state = 'RUNNING' THEN COALESCE(started_at, :now) ELSE started_at END,
    finished_at = CASE WHEN :state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'NEEDS_REVIEW') THEN :now ELSE finished_at END,
    needs_reconcile = CASE WHEN :state IN ('SUCCEEDED', 'FAILED', 'CANCELLED') THEN 0 ELSE needs_reconcile END,
    owner = CASE WHEN :state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'NEEDS_REVIEW', 'QUEUED') THEN NULL ELSE owner END,
    lease_expires_at = CASE WHEN :state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'NEEDS_REVIEW', 'QUEUED') THEN NULL
                            ELSE lease_expires_at END
WHERE id = :id AND lease_epoch = :epoch AND (state = :from_state OR :from_state IS NULL)

-- name: start_run
-- set_run_state to RUNNING: touches only the columns (and so the indexes) that change.
UPDATE runs
SET state = 'RUNNING', error = :error, updated_at = :now, started_at = COALESCE(started_at, :now)
WHERE id = :id AND lease_epoch = :epoch AND (state = :from_state OR :from_state IS NULL)

-- name: end_run
-- set_run_state to SUCCEEDED, FAILED, CANCELLED or NEEDS_REVIEW.
UPDATE runs
SET state = :state, error = :error, updated_at = :now, finished_at = :now, owner = NULL, lease_expires_at = NULL,
    needs_reconcile = CASE WHEN :state = 'NEEDS_REVIEW' THEN needs_reconcile ELSE 0 END
WHERE id = :id AND lease_epoch = :epoch AND (state = :from_state OR :from_state IS NULL)

-- name: clear_reconcile
UPDATE runs SET needs_reconcile = 0, updated_at = :now WHERE id = :id AND lease_epoch = :epoch

-- name: next_attempt_no
-- Read in the write transaction that inserts the attempt. (Not a subquery of the insert: an
-- INSERT whose SELECT reads the table it inserts into is run into a temporary table first.)
-- Two fenced owners cannot both insert one number: UNIQUE (run_id, step_id, attempt_no).
SELECT COALESCE(MAX(attempt_no), 0) + 1 AS n FROM attempts WHERE run_id = :run_id AND step_id = :step_id

-- name: insert_attempt
-- Fenced by epoch and, for effects, by the dispatch margin, on the run row it reads.
INSERT INTO attempts (run_id, step_id, kind, attempt_no, request_key, request_fingerprint, state,
                      lease_epoch, worker, intent_at)
SELECT :run_id, :step_id, :kind, :attempt_no, :request_key, :fingerprint, :state, :epoch, :worker, :now
FROM runs
WHERE id = :run_id AND lease_epoch = :epoch AND lease_expires_at >= {clock} + :margin {share_run}

-- name: get_attempt
SELECT * FROM attempts WHERE id = :id

-- name: attempts_of_run
SELECT * FROM attempts WHERE run_id = :run_id ORDER BY id

-- name: history
-- A run's attempts, when it was last restored (restored_at) and when a person last requeued it
-- (requeued_at: its failure budget starts again there), the same on every row, in one
-- statement: one row of NULL attempt columns when it has no attempts yet.
SELECT (SELECT MAX(at) FROM events WHERE run_id = :run_id AND kind = 'restored') AS restored_at,
    (SELECT MAX(at) FROM events WHERE run_id = :run_id AND decision = 'requeued') AS requeued_at, attempts.*
FROM (SELECT 1) AS one LEFT JOIN attempts ON attempts.run_id = :run_id
ORDER BY attempts.id

-- name: dispatched_at
SELECT dispatched_at FROM attempts WHERE id = :id

-- name: latest_attempt
SELECT * FROM attempts WHERE run_id = :run_id AND step_id = :step_id ORDER BY attempt_no DESC LIMIT 1

-- name: effect_boundary
-- What the executor reads before an effect, in one statement: the run's cancel flag and the
-- step's latest attempt (its columns NULL when there is none; no row when the run is gone).
SELECT runs.cancel_requested AS run_cancel_requested, attempts.*
FROM runs LEFT JOIN attempts ON attempts.id = (
    SELECT id FROM attempts WHERE run_id = :run_id AND step_id = :step_id ORDER BY attempt_no DESC LIMIT 1)
WHERE runs.id = :run_id

-- name: mark_dispatched
-- The dispatch gate's fenced commit: only while the lease has the margin left.
UPDATE attempts SET dispatched_at = COALESCE(dispatched_at, :now)
WHERE id = :attempt_id AND state = 'INTENT'
  AND EXISTS (SELECT 1 FROM runs
              WHERE runs.id = attempts.run_id AND runs.lease_epoch = :epoch
                AND runs.lease_expires_at >= {clock} + :margin {share_run})

-- name: insert_outbox
INSERT INTO outbox (attempt_id, run_id, step_id, method, url, released_at, channel)
VALUES (:attempt_id, :run_id, :step_id, :method, :url, :now, :channel)

-- name: record_final
-- The last answer of a redirect chain (the first answer stays in status / response_url).
UPDATE outbox SET final_status = :status, final_url = :url WHERE id = :id

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
    evidence = :evidence, error = :error,
    dispatched_at = CASE WHEN :dispatched THEN COALESCE(dispatched_at, :now) ELSE dispatched_at END
WHERE id = :attempt_id AND state = :from_state
  AND EXISTS (SELECT 1 FROM runs WHERE runs.id = attempts.run_id AND runs.lease_epoch = :epoch {share_run})

-- name: insert_fenced_event
-- An event written for a lease holder (a decision): fenced by epoch on the run row it reads, as
-- insert_attempt is; zero rows means the caller no longer owns the run.
INSERT INTO events (at, run_id, step_id, attempt_no, worker, lease_epoch, kind, decision, detail_json)
SELECT :at, :run_id, :step_id, :attempt_no, :worker, :epoch, :kind, :decision, :detail_json
FROM runs
WHERE id = :run_id AND lease_epoch = :epoch {share_run}

-- name: insert_event
-- Called with its values by position, in this order (Tx.insert_values): every transition
-- writes one, several per run, and binding eleven names costs more than the insert's index writes.
INSERT INTO events (at, run_id, step_id, attempt_no, worker, lease_epoch, kind, from_state, to_state, decision,
                    detail_json)
VALUES (:at, :run_id, :step_id, :attempt_no, :worker, :epoch, :kind, :from_state, :to_state, :decision,
        :detail_json)

-- name: restored_at
-- When the run was last restored from a backup (NULL if never).
SELECT MAX(at) AS at FROM events WHERE run_id = :run_id AND kind = 'restored'

-- name: events_of_run
SELECT * FROM events WHERE run_id = :run_id ORDER BY id

-- name: queued_depth
SELECT COUNT(*) AS depth FROM runs WHERE queue = :queue AND state = 'QUEUED'

-- name: get_queue
SELECT * FROM queues WHERE name = :name {lock_row}

-- name: set_queue
INSERT INTO queues (name, max_depth) VALUES (:name, :max_depth)
ON CONFLICT (name) DO UPDATE SET max_depth = excluded.max_depth

-- name: list_queues
SELECT * FROM queues ORDER BY name

-- name: _limit_open
-- (A fragment of the claims, not a query.) The run's limit key has no budget, or its budget
-- lets one more run start now: not paused, under its concurrency, a rate token left. Only a
-- key with a `limits` row pays for more than one primary-key probe.
NOT EXISTS (SELECT 1 FROM limits WHERE limits.key = runs.limit_key AND (
        limits.paused_until > :now
     OR limits.concurrency <= (SELECT COUNT(*) FROM runs AS live
                               WHERE live.limit_key = limits.key AND live.state IN ('LEASED', 'RUNNING'))
     OR limits.tokens + (:now - limits.refilled_at) * limits.rate / 60.0 < 1))

-- name: next_queued_full
-- `limited`: the run's key has a budget, which the claim re-checks under the key's lock.
SELECT runs.*, (SELECT COUNT(*) FROM limits WHERE limits.key = runs.limit_key) AS limited FROM runs
WHERE queue = :queue AND state = 'QUEUED' AND (not_before IS NULL OR not_before <= :now) AND {_limit_open}
ORDER BY priority DESC, created_at, id
LIMIT 1 {skip_locked}

-- name: next_queued_ids
-- The next :n runs of one queue (priority, then age) that their budgets let start; claimed by
-- claim_queued_by_id (a worker with several free slots takes several in one claim).
SELECT id, limit_key, (SELECT COUNT(*) FROM limits WHERE limits.key = runs.limit_key) AS limited FROM runs
WHERE queue = :queue AND state = 'QUEUED' AND (not_before IS NULL OR not_before <= :now) AND {_limit_open}
ORDER BY priority DESC, created_at, id
LIMIT :n {skip_locked}

-- name: claim_queued_by_id
-- With :start (1), a run leased for the first time (epoch 0, nothing to reconcile) is started
-- in the same write: RUNNING, started_at set (claim_next's start).
UPDATE runs
SET state = CASE WHEN :start = 1 AND lease_epoch = 0 AND needs_reconcile = 0 THEN 'RUNNING' ELSE 'LEASED' END,
    started_at = CASE WHEN :start = 1 AND lease_epoch = 0 AND needs_reconcile = 0 THEN :now ELSE started_at END,
    owner = :owner, owner_host = :host, owner_pid = :pid, owner_pid_start = :pid_start,
    lease_epoch = lease_epoch + 1, lease_expires_at = :now + :ttl, updated_at = :now
WHERE id = :id AND state = 'QUEUED'

-- name: expired_leases
SELECT * FROM runs WHERE state IN ('LEASED', 'RUNNING') AND lease_expires_at < :now - :skew
ORDER BY lease_expires_at LIMIT :limit

-- name: end_stuck_sessions
-- End the store's database sessions stuck inside a transaction for more than :stuck seconds (a
-- client frozen mid-statement keeps its row locks, and the reclaimer skips locked runs); how
-- many. A store with no server sessions has none (PostgreSQL's: postgres.sql).
SELECT 0 AS ended

-- name: next_lease_expiry
-- When the earliest live lease expires (the reclaimer wakes then, not at its next poll).
SELECT MIN(lease_expires_at) AS at FROM runs WHERE state IN ('LEASED', 'RUNNING')

-- name: requeue_expired
-- The reclaimer: an expired lease goes back to QUEUED (or to review once it was lost too
-- often), flagged for reconciliation; the epoch is bumped so the old owner is fenced off.
UPDATE runs
SET state = :state, owner = NULL, lease_expires_at = NULL, lease_epoch = lease_epoch + 1,
    owner_stopped_at = CASE WHEN lease_expires_at < :now THEN lease_expires_at ELSE :now END, needs_reconcile = 1, lease_losses = lease_losses + 1,
    error = :error, finished_at = CASE WHEN :state = 'NEEDS_REVIEW' THEN :now ELSE finished_at END,
    updated_at = :now
WHERE id = :id AND lease_epoch = :epoch AND state IN ('LEASED', 'RUNNING') AND lease_expires_at < {clock} - :skew

-- name: owned_on_host
-- Live leases on a host, but the asking worker's own (it is alive: it is asking).
-- (`owner IS DISTINCT FROM :worker`, spelled so that SQLite before 3.39 reads it too.)
SELECT * FROM runs
WHERE owner_host = :host AND state IN ('LEASED', 'RUNNING')
  AND (owner <> :worker OR (owner IS NULL) <> (:worker IS NULL))

-- name: requeue_dead_owner
-- The owner was proven gone (same host, pid dead): requeue at once, no expiry wait.
UPDATE runs
SET state = :state, owner = NULL, lease_expires_at = NULL, lease_epoch = lease_epoch + 1,
    owner_stopped_at = :now, needs_reconcile = 1, lease_losses = lease_losses + 1,
    error = :error, finished_at = CASE WHEN :state = 'NEEDS_REVIEW' THEN :now ELSE finished_at END,
    updated_at = :now
WHERE id = :id AND lease_epoch = :epoch AND state IN ('LEASED', 'RUNNING')

-- name: release_run
-- A stopping worker hands a run back at a step boundary: QUEUED at once, no expiry wait.
UPDATE runs
SET state = 'QUEUED', owner = NULL, lease_expires_at = NULL, lease_epoch = lease_epoch + 1, updated_at = :now
WHERE id = :id AND lease_epoch = :epoch AND state IN ('LEASED', 'RUNNING')

-- name: cancel_queued
UPDATE runs SET state = 'CANCELLED', finished_at = :now, updated_at = :now, owner = NULL, lease_expires_at = NULL
WHERE id = :id AND (state IN ('QUEUED', 'NEEDS_REVIEW') OR state = 'AWAITING_APPROVAL')

-- name: requeue_ended
-- An operator puts a FAILED or CANCELLED run back in its queue, with its id, journal and request
-- keys: SUCCEEDED steps are skipped, and a run that was ever leased reconciles its journal first.
UPDATE runs SET state = 'QUEUED', error = NULL, finished_at = NULL, cancel_requested = 0, lease_losses = 0,
    needs_reconcile = CASE WHEN lease_epoch > 0 THEN 1 ELSE needs_reconcile END, updated_at = :now
WHERE id = :id AND state IN ('FAILED', 'CANCELLED')

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
  AND EXISTS (SELECT 1 FROM runs WHERE runs.id = attempts.run_id AND runs.state = 'NEEDS_REVIEW' {share_run})

-- name: register_worker
INSERT INTO workers (id, host, pid, pid_start, queues, concurrency, started_at, last_heartbeat, health)
VALUES (:id, :host, :pid, :pid_start, :queues, :concurrency, :now, :now, 'healthy')

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

-- ops
-- Read-only queries for metrics, `status`, `health` and the restore checks. Each is an
-- index range or a covering-index scan (indexes in 0003_ops.sql). Ages and windows are
-- taken against :now, the store's clock.

-- name: ops_runs_by_state
SELECT queue, state, COUNT(*) AS n FROM runs GROUP BY state, queue

-- name: ops_queued
-- QUEUED runs per queue: all, those claimable now, and when the oldest claimable one became
-- claimable (enqueued, or its --delay ended).
SELECT queue, COUNT(*) AS queued,
       SUM(CASE WHEN not_before IS NULL OR not_before <= :now THEN 1 ELSE 0 END) AS ready,
       MIN(CASE WHEN not_before IS NULL OR not_before <= :now
                THEN CASE WHEN not_before > created_at THEN not_before ELSE created_at END END) AS oldest_ready_at
FROM runs WHERE state = 'QUEUED' GROUP BY queue

-- name: ops_unknown_open
-- Effect attempts that are UNKNOWN now (not yet reconciled), and how many of them became
-- UNKNOWN since :since.
SELECT r.queue, r.flow_name, a.step_id, COUNT(*) AS n,
       SUM(CASE WHEN a.finished_at > :since THEN 1 ELSE 0 END) AS recent
FROM attempts a JOIN runs r ON r.id = a.run_id
WHERE a.state = 'UNKNOWN'
GROUP BY r.queue, r.flow_name, a.step_id

-- name: ops_unknown_classified
-- Every classification of an attempt as UNKNOWN, ever (a counter that survives restarts).
SELECT r.flow_name, e.step_id, COUNT(*) AS n, SUM(CASE WHEN e.at > :since THEN 1 ELSE 0 END) AS recent
FROM events e JOIN runs r ON r.id = e.run_id
WHERE e.kind = 'attempt_state' AND e.to_state = 'UNKNOWN'
GROUP BY r.flow_name, e.step_id

-- name: ops_duplicates_prevented
-- Reconciliations that proved an UNKNOWN effect had landed (outbox, verifier or a person said
-- done), so it was not replayed.
SELECT r.flow_name, e.step_id, e.decision, COUNT(*) AS n
FROM events e JOIN runs r ON r.id = e.run_id
WHERE e.kind = 'attempt_state' AND e.from_state = 'UNKNOWN' AND e.to_state = 'SUCCEEDED'
GROUP BY r.flow_name, e.step_id, e.decision

-- name: ops_lease_expiries
SELECT COUNT(*) AS total, COALESCE(SUM(CASE WHEN at > :since THEN 1 ELSE 0 END), 0) AS recent
FROM events WHERE kind = 'lease_expired'

-- name: ops_reconciliations
-- For each lost lease (found expired by the reclaimer, or taken over at expiry or from a dead
-- owner), the first event after it on the same run that settles what was in doubt: a recovery
-- decision on an INTENT/UNKNOWN effect, a needs_review/idempotent_replay decision, or (nothing
-- was in doubt) a fresh effect attempt, the run's end or the next lost lease.
SELECT d.run_id, d.at AS detected_at, f.kind, f.from_state, f.to_state, f.decision, f.at AS decided_at
FROM events d
JOIN events f ON f.id = (
    SELECT g.id FROM events g
    WHERE g.run_id = d.run_id AND g.id > d.id
      AND ((g.kind = 'attempt_state' AND g.from_state IN ('INTENT', 'UNKNOWN')
            AND NOT (g.to_state = 'UNKNOWN' AND g.decision IN ('recovery:dispatched', 'restore:unproven')))
        OR (g.kind = 'decision' AND g.decision IN ('needs_review', 'idempotent_replay'))
        OR (g.kind = 'run_state' AND g.to_state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'NEEDS_REVIEW'))
        OR g.kind = 'lease_expired'
        OR (g.kind = 'lease_claimed' AND g.decision IN ('lease_expired', 'owner_dead')))
    ORDER BY g.id LIMIT 1)
WHERE (d.kind = 'lease_expired' OR (d.kind = 'lease_claimed' AND d.decision IN ('lease_expired', 'owner_dead')))
  -- implied by the line above; spelled out so that the planner reads the partial index events_lost
  AND (d.kind = 'lease_expired' OR d.decision IN ('lease_expired', 'owner_dead'))

-- name: ops_event_times
-- When each lost lease found by the reclaimer, and each UNKNOWN effect proven landed (a duplicate
-- prevented), happened since :since (the console's activity chart).
SELECT 'lease_expired' AS what, at FROM events WHERE kind = 'lease_expired' AND at > :since
UNION ALL
SELECT 'duplicate_prevented' AS what, at FROM events
WHERE kind = 'attempt_state' AND from_state = 'UNKNOWN' AND to_state = 'SUCCEEDED' AND at > :since

-- name: ops_dispatch_ages
-- How long each run started in (:lo, :hi] had waited in its queue (seconds).
SELECT queue, started_at - CASE WHEN not_before > created_at THEN not_before ELSE created_at END AS waited
FROM runs WHERE started_at > :lo AND started_at <= :hi

-- name: ops_completion_ages
-- How long each run that SUCCEEDED in (:lo, :hi] took from its queue to confirmed completion.
SELECT queue, finished_at - CASE WHEN not_before > created_at THEN not_before ELSE created_at END AS waited
FROM runs WHERE finished_at > :lo AND finished_at <= :hi AND state = 'SUCCEEDED'

-- name: ops_workers
-- Registered workers not stopped, or stopped since :since, that heartbeated after :gone_since,
-- with the runs each holds now.
SELECT w.*, (SELECT COUNT(*) FROM runs r WHERE r.state IN ('LEASED', 'RUNNING') AND r.owner = w.id) AS leased
FROM workers w
WHERE (w.stopped_at IS NULL OR w.stopped_at > :since) AND w.last_heartbeat > :gone_since
ORDER BY w.started_at DESC

-- name: ops_live_workers
-- Workers that claim to be running and heartbeated after :since (restore refuses while any do).
SELECT * FROM workers WHERE health <> 'stopped' AND last_heartbeat > :since ORDER BY last_heartbeat DESC

-- name: ops_live_leases
-- Runs whose lease has not expired at :now (their owner may still be working).
SELECT id, state, owner, owner_host, owner_pid, owner_pid_start, lease_epoch, lease_expires_at
FROM runs WHERE state IN ('LEASED', 'RUNNING') AND lease_expires_at > :now

-- name: ops_unfinished_runs
SELECT id, state, owner, lease_epoch FROM runs WHERE state IN ('QUEUED', 'LEASED', 'RUNNING', 'NEEDS_REVIEW')

-- name: ops_restore_requeue
-- After a restore: the owners of the restored leases are gone; hand their runs back to the
-- queue, flagged for reconciliation, and fence the old owners off (epoch + 1).
UPDATE runs
SET state = 'QUEUED', owner = NULL, lease_expires_at = NULL, lease_epoch = lease_epoch + 1,
    owner_stopped_at = :now, needs_reconcile = 1, updated_at = :now
WHERE id = :id AND state IN ('LEASED', 'RUNNING')

-- name: ops_restore_flag
UPDATE runs SET needs_reconcile = 1, updated_at = :now WHERE id = :id

-- name: ops_restore_stop_workers
UPDATE workers SET health = 'stopped', stopped_at = COALESCE(stopped_at, :now) WHERE health <> 'stopped'

-- name: ops_last_event
SELECT at FROM events ORDER BY id DESC LIMIT 1

-- name: session_get
SELECT * FROM login_sessions WHERE key = :key

-- name: session_list
SELECT * FROM login_sessions ORDER BY key

-- name: session_create
-- The row a login claim is taken in (a key seen for the first time).
INSERT INTO login_sessions (key, flow_name, created_at) VALUES (:key, :flow_name, :now)
ON CONFLICT (key) DO NOTHING

-- name: session_claim
-- One login per key at a time: the claim is free, expired, or already ours, and nothing newer
-- than the state the caller found unusable was saved meanwhile (then it uses that instead).
UPDATE login_sessions SET login_owner = :owner, login_until = :now + :ttl, flow_name = :flow_name
WHERE key = :key AND version <= :seen AND (login_owner IS NULL OR login_until < {clock} OR login_owner = :owner)

-- name: session_save
-- A login's storage state: saved by the claim's holder, or by a run that logged in after the
-- state saved now was (a stale writer never overwrites a newer login with an older one).
UPDATE login_sessions
SET state = :state, key_id = :key_id, flow_name = :flow_name, saved_by = :owner, saved_at = :now, used_at = :now,
    max_age = :max_age,
    uses = uses + 1, version = version + 1,
    login_owner = CASE WHEN login_owner = :owner THEN NULL ELSE login_owner END,
    login_until = CASE WHEN login_owner = :owner THEN NULL ELSE login_until END
WHERE key = :key AND (login_owner = :owner OR saved_at IS NULL OR saved_at < :logged_in_at)

-- name: session_release
UPDATE login_sessions SET login_owner = NULL, login_until = NULL WHERE key = :key AND login_owner = :owner

-- name: session_used
UPDATE login_sessions SET uses = uses + 1, used_at = :now WHERE key = :key

-- name: session_drop
DELETE FROM login_sessions WHERE key = :key

-- Budgets of limit keys (browserworker/budgets.py; store/limits.py).

-- name: lock_limit
-- A claim of a limited key: the key's row, locked, so concurrent claimers of the key take
-- turns; the statements after it see every claim committed before the lock was granted.
SELECT * FROM limits WHERE key = :key {lock_row}

-- name: live_of_key
SELECT COUNT(*) AS n FROM runs WHERE limit_key = :key AND state IN ('LEASED', 'RUNNING')

-- name: take_limit_token
UPDATE limits SET tokens = :tokens, refilled_at = :now WHERE key = :key

-- name: insert_limit
-- Two runs throttled at once may both find no row: the second insert is a no-op.
INSERT INTO limits (key, updated_at) VALUES (:key, :now) ON CONFLICT (key) DO NOTHING

-- name: set_limit
UPDATE limits SET concurrency = :concurrency, rate = :rate, tokens = :tokens, refilled_at = :now, updated_at = :now
WHERE key = :key

-- name: pause_limit
-- A pause only ever grows: a shorter Retry-After than the one in force changes nothing.
UPDATE limits SET paused_until = :until, pause_reason = :reason, updated_at = :now
WHERE key = :key AND (paused_until IS NULL OR paused_until < :until)

-- name: delete_limit
DELETE FROM limits WHERE key = :key

-- name: delete_limits
DELETE FROM limits

-- name: list_limits
-- Each key with a budget or a pause: its live runs and its claims in the last minute.
SELECT limits.*,
       (SELECT COUNT(*) FROM runs WHERE runs.limit_key = limits.key AND runs.state IN ('LEASED', 'RUNNING')) AS live,
       (SELECT COUNT(*) FROM events JOIN runs ON runs.id = events.run_id
        WHERE events.kind = 'lease_claimed' AND events.at >= :since AND runs.limit_key = limits.key) AS claims
FROM limits ORDER BY key

-- name: limit_pauses
-- How many times keys were paused by a Retry-After, by key (the metric's counter).
SELECT runs.limit_key AS key, COUNT(*) AS n FROM events JOIN runs ON runs.id = events.run_id
WHERE events.kind = 'limit_paused' GROUP BY runs.limit_key ORDER BY runs.limit_key

-- Approvals (store/approvals.py): a request held for a person's decision before it dispatches.

-- name: insert_approval
INSERT INTO approvals (run_id, step_id, attempt_no, request_key, fingerprint, summary_json, screenshot, state,
                       worker, created_at, expires_at)
VALUES (:run_id, :step_id, :attempt_no, :request_key, :fingerprint, :summary_json, :screenshot, 'PENDING',
        :worker, :now, :expires_at)

-- name: get_approval
SELECT * FROM approvals WHERE id = :id

-- name: latest_approval
-- The step's live approval: the newest not superseded.
SELECT * FROM approvals WHERE run_id = :run_id AND step_id = :step_id AND state <> 'SUPERSEDED'
ORDER BY id DESC LIMIT 1

-- name: pending_approval_of_run
SELECT id FROM approvals WHERE run_id = :run_id AND state = 'PENDING' LIMIT 1

-- name: decide_approval
-- A decision on a PENDING approval (approved, rejected, expired, superseded): once only.
UPDATE approvals SET state = :state, decided_at = :now, decided_by = :who, reason = :reason
WHERE id = :id AND state = 'PENDING'

-- name: supersede_approval
-- A request that changed since it was asked about (or approved): the old row no longer counts.
UPDATE approvals SET state = 'SUPERSEDED', reason = :reason WHERE id = :id AND state IN ('PENDING', 'APPROVED')

-- name: approvals_waiting
SELECT approvals.*, runs.flow_name AS flow_name, runs.state AS run_state FROM approvals
JOIN runs ON runs.id = approvals.run_id
WHERE approvals.state = 'PENDING' AND runs.state IN ('AWAITING_APPROVAL', 'QUEUED', 'LEASED', 'RUNNING')
ORDER BY approvals.created_at, approvals.id LIMIT :limit

-- name: approvals_due
SELECT id, run_id, step_id, attempt_no FROM approvals WHERE state = 'PENDING' AND expires_at < :now
ORDER BY expires_at LIMIT :limit

-- name: approvals_of_run
SELECT * FROM approvals WHERE run_id = :run_id ORDER BY id

-- name: park_run
-- The lease holder parks its run for a decision (AWAITING_APPROVAL), or queues it (approved
-- meanwhile) or fails it (rejected, expired); the epoch is bumped so the holder is fenced off.
UPDATE runs
SET state = :state, owner = NULL, lease_expires_at = NULL, lease_epoch = lease_epoch + 1, error = :error,
    finished_at = CASE WHEN :state = 'FAILED' THEN :now ELSE finished_at END,
    needs_reconcile = CASE WHEN :state = 'FAILED' THEN 0 ELSE needs_reconcile END, updated_at = :now
WHERE id = :id AND lease_epoch = :epoch AND state IN ('LEASED', 'RUNNING')

-- name: approved_run
-- A decision on a parked run: approved → QUEUED, rejected or expired → FAILED.
UPDATE runs
SET state = :state, error = :error, updated_at = :now,
    finished_at = CASE WHEN :state = 'FAILED' THEN :now ELSE finished_at END,
    needs_reconcile = CASE WHEN :state = 'FAILED' THEN 0 ELSE needs_reconcile END
WHERE id = :id AND state = 'AWAITING_APPROVAL'

-- name: count_awaiting_approval
SELECT COUNT(*) AS n FROM runs WHERE state = 'AWAITING_APPROVAL'

-- Console sessions (store/console_sessions.py): who is signed in to the console, until when.

-- name: console_session_create
INSERT INTO console_sessions (id_hash, name, role, token_key, created_at, expires_at)
VALUES (:id_hash, :name, :role, :token_key, :now, :expires_at)

-- name: console_session_get
-- A live session: its row, while it has not expired.
SELECT * FROM console_sessions WHERE id_hash = :id_hash AND expires_at > :now

-- name: console_session_end
DELETE FROM console_sessions WHERE id_hash = :id_hash

-- name: console_session_end_name
-- Sign out everywhere: every session of one name in one role.
DELETE FROM console_sessions WHERE name = :name AND role = :role

-- name: console_session_end_stale
-- Sessions that expired, or were made with a token that is no longer the role's.
DELETE FROM console_sessions
WHERE expires_at <= :now OR (role = 'operator' AND token_key <> :operator) OR (role = 'viewer' AND token_key <> :viewer)
   OR role NOT IN ('operator', 'viewer')

-- name: console_session_count
SELECT COUNT(*) AS n FROM console_sessions
