-- browserworker schema, version 6: a worker's process identity beside its pid
-- ('<start time>@<pid space>', as runs.owner_pid_start): only a process of the same host name
-- and the same pid namespace is ever judged gone by its pid.
ALTER TABLE workers ADD COLUMN pid_start TEXT;
