-- Every model request through the model gateway: who, which model, what it used.
CREATE TABLE model_requests (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    worker              TEXT NOT NULL,
    turn                INTEGER,
    upstream            TEXT NOT NULL,
    model               TEXT NOT NULL,
    status              INTEGER NOT NULL,
    input_tokens        INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    cost_usd            REAL NOT NULL,
    latency_ms          INTEGER NOT NULL,
    at                  INTEGER NOT NULL
);
CREATE INDEX model_requests_by_worker ON model_requests(worker, model);
