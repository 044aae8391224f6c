-- sluice state, version 2 (PostgreSQL; as migrations/sqlite/0002_cluster.sql): the local executor schedules onto a declared cluster (`--cluster`).

-- The Cluster file given with --cluster, as {"file": ..., "source": ...}: resume uses the same.
ALTER TABLE runs ADD COLUMN cluster TEXT;

-- Cluster mode only: what the attempt asked of the scheduler (team, priority, gang size,
-- resources per worker, interruptible, checkpointed, flavor; JSON) and the virtual node of
-- each worker (a JSON array of node indices). `gpus` then holds each worker's GPU indices on
-- its node, worker after worker.
ALTER TABLE attempts ADD COLUMN job TEXT;
ALTER TABLE attempts ADD COLUMN nodes TEXT;

-- Queued steps of cluster-mode runs, as every engine on this home sees them: one scheduling
-- cycle weighs the waiting steps of all runs. Rows of runs no engine drives (lease expired)
-- and of steps no longer Queued are ignored by the readers, so none needs cleaning up first.
CREATE TABLE waiting (
    run_id          TEXT NOT NULL,
    step            TEXT NOT NULL,
    job             TEXT NOT NULL,          -- as attempts.job
    submitted       BIGINT NOT NULL,        -- unix ms: when it started waiting (its age)
    seq             BIGINT GENERATED ALWAYS AS IDENTITY, -- ties broken by arrival (SQLite: rowid)
    PRIMARY KEY (run_id, step)
);

-- Trial-start rate limits (`maxTrialsPerMinute`), shared by every engine on the home: a
-- generic cell rate algorithm, one row per team holding the earliest time (unix ms) its next
-- trial may start. Taken in the transaction that starts the trial, so a token is spent only
-- by a trial that starts.
CREATE TABLE trial_starts (
    team            TEXT PRIMARY KEY,
    next_at         BIGINT NOT NULL
);
