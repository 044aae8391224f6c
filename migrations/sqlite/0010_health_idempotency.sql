-- sluice state, version 10: readiness that writes, and submissions a client may retry.

-- One row per server: `/readyz` writes its row, so that a store that can be read but not
-- written (a full disk, a read-only file) is not ready.
CREATE TABLE health (
    owner TEXT PRIMARY KEY,
    at TEXT NOT NULL
);

-- A submission's `Idempotency-Key`, recorded in the transaction that records its run: the
-- same key from the same team again is answered with that run, never a second one. `hash`
-- is the SHA-256 of the request, so that the key reused for another request is refused.
CREATE TABLE idempotency (
    team TEXT NOT NULL,
    key TEXT NOT NULL,
    hash TEXT NOT NULL,
    run_id TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (team, key)
);
CREATE INDEX idempotency_by_created ON idempotency (created_at);
