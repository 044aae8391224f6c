-- sluice state, version 1, for PostgreSQL: the same tables, columns and meaning as
-- migrations/sqlite/0001_init.sql. Every integer is BIGINT (sqlx reads them as i64 on both
-- backends), and the orders SQLite gets from `rowid` come from identity columns (`seq`).
-- Never edit an applied migration: sqlx checks each one's checksum; add a new one instead.

CREATE TABLE runs (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    team            TEXT NOT NULL,
    state           TEXT NOT NULL,          -- Running | Succeeded | Failed | Cancelled
    reason          TEXT,
    file            TEXT NOT NULL,          -- the YAML file, as given
    workdir         TEXT NOT NULL,          -- the folder holding it: steps' default workdir
    objects         TEXT NOT NULL,          -- the object store's URL (file:///...), fixed at submission
    source          TEXT NOT NULL,          -- the YAML text, as submitted
    document        TEXT,                   -- which document of the file (--name)
    params          TEXT NOT NULL,          -- resolved parameters, a JSON object
    created_at      TEXT NOT NULL,
    ended_at        TEXT,
    cancel_requested BIGINT NOT NULL DEFAULT 0,
    lease_owner     TEXT,                   -- "PID@HOST" of the engine driving the run
    lease_until     BIGINT                  -- unix milliseconds
);

CREATE TABLE steps (
    run_id          TEXT NOT NULL,
    name            TEXT NOT NULL,          -- instance name: train, evaluate[1]
    step            TEXT NOT NULL,          -- the step of the file it comes from
    item            TEXT,                   -- forEach item, JSON
    state           TEXT NOT NULL,          -- Pending | Queued | Running | Succeeded | Failed | Cached | Skipped | Cancelled
    reason          TEXT,
    attempts        BIGINT NOT NULL DEFAULT 0,
    retries_used    BIGINT NOT NULL DEFAULT 0,
    not_before      BIGINT,                 -- unix ms: waiting out a retry backoff
    metrics         TEXT,                   -- JSON object of last values
    outputs         TEXT,                   -- folder holding the outputs, when succeeded or cached
    cache_key       TEXT,
    started_at      TEXT,
    ended_at        TEXT,
    seq             BIGINT GENERATED ALWAYS AS IDENTITY, -- creation order (SQLite: rowid)
    PRIMARY KEY (run_id, name)
);

CREATE TABLE attempts (
    run_id          TEXT NOT NULL,
    step            TEXT NOT NULL,          -- instance name
    number          BIGINT NOT NULL,
    state           TEXT NOT NULL,          -- Running | Succeeded | Failed | Timeout | Preempted | Lost | Cancelled
    dir             TEXT NOT NULL,          -- the attempt's folder (launch.json, lock, result.json)
    millicpu        BIGINT NOT NULL,
    memory          BIGINT NOT NULL,
    gpus            TEXT,                   -- GPU indices held while Running, comma-separated
    pid             BIGINT,
    exit_code       BIGINT,
    signal          BIGINT,
    reason          TEXT,
    metrics         TEXT,                   -- the last value of each metric the attempt reported, a JSON object
    started_at      TEXT NOT NULL,
    ended_at        TEXT,
    PRIMARY KEY (run_id, step, number)
);

CREATE INDEX attempts_running ON attempts (state);

-- Append-only. `id` orders events (an identity column here; SQLite's rowid there), so
-- appending needs no read first.
CREATE TABLE events (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id          TEXT NOT NULL,
    at              TEXT NOT NULL,
    step            TEXT,
    kind            TEXT NOT NULL,
    detail          TEXT
);
CREATE INDEX events_by_run ON events (run_id, id);

CREATE TABLE cache (
    team            TEXT NOT NULL,
    key             TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    step            TEXT NOT NULL,
    outputs         TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    PRIMARY KEY (team, key)
);
