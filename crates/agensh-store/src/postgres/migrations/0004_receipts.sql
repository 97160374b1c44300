-- Schema 4 of the PostgreSQL store (the SQLite store's 12): delivery receipts, one row per
-- recipient of a message or urgent event (`receipt::has_receipts`) once it was shown to
-- that worker: when, how (`via`: tool_result, prompt or interruption), and when the tool
-- call or turn that carried it completed. A recipient without a row was not shown it yet
-- (`stored`).
CREATE TABLE receipts (
    seq             BIGINT NOT NULL,
    worker          TEXT NOT NULL,
    presented_at    BIGINT NOT NULL,
    via             TEXT NOT NULL,
    acknowledged_at BIGINT,
    PRIMARY KEY (seq, worker)
);
-- The newest presentations: the stored → presented times /metrics reports.
CREATE INDEX receipts_by_presented ON receipts(presented_at);
-- Urgent events for one worker by age: the hub's look for those waiting too long.
CREATE INDEX events_urgent_by_time ON events(created_at)
    WHERE target IS NOT NULL AND priority = 'urgent';
