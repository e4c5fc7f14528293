-- browserworker schema, version 5: how each dispatch left, and a redirect chain's last answer.
-- channel: 'held' (a browser request the gate held until this row was committed), 'api' (a
-- page.request call the kit journaled before sending it), 'websocket' (a message the page sent,
-- held the same way), 'detected' (the browser let something out, or may have, without asking the
-- gate: journaled when seen, so recovery reconciles the attempt instead of replaying it).
ALTER TABLE outbox ADD COLUMN channel TEXT NOT NULL DEFAULT 'held';
ALTER TABLE outbox ADD COLUMN final_status INTEGER;
ALTER TABLE outbox ADD COLUMN final_url TEXT;
