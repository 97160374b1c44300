-- Budgets set while the organization runs (`agensh budget set`): scope `*` (every
-- worker's default), `organization`, or one worker's id. 0: no limit.
CREATE TABLE budgets (
    scope    TEXT PRIMARY KEY,
    tokens   INTEGER NOT NULL,
    cost_usd REAL NOT NULL,
    requests INTEGER NOT NULL,
    hours    REAL NOT NULL
);
