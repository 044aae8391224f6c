-- The leader among the servers sharing this store (`sluice server`): one row. A server
-- becomes the leader by raising `epoch` once the holder's lease (`until_ms`, unix ms) has
-- run out, and renews it while it leads. Every write of the leader's engine checks, in its
-- own transaction, that `epoch` is still the one it was elected with (a fence: a leader
-- that was cut off cannot write after another took over).
CREATE TABLE leader (
    id              INTEGER PRIMARY KEY,
    epoch           BIGINT NOT NULL,
    holder          TEXT,
    until_ms        BIGINT NOT NULL
);

INSERT INTO leader (id, epoch, holder, until_ms) VALUES (1, 0, NULL, 0);
