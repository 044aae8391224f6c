-- sluice state, version 12: what one process changed that another must act on (an outbox).

-- Written in the transaction that makes the change: a cancel asked for, a run created or
-- reopened, an attempt's end (its room free). Each process's watcher reads what is past the
-- last sequence it saw (store::feed); rows older than ten minutes are removed.
CREATE TABLE changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    at BIGINT NOT NULL
);
CREATE INDEX changes_by_at ON changes (at);

-- The running runs and who drives them, read by a server looking for runs nobody drives
-- (without reading every running run's row).
CREATE INDEX runs_by_state_owner ON runs (state, lease_owner);
