-- Nodes on other hosts: a node's token may only register it and receive its workers.
-- `workers` is how many it may run.
CREATE TABLE nodes (
    name          TEXT PRIMARY KEY,
    token         TEXT NOT NULL UNIQUE,
    workers       INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    registered_at INTEGER
);

-- Which node runs which worker: a worker belongs to at most one node, and keeps it
-- across the node's registrations until the node is revoked.
CREATE TABLE node_workers (
    worker TEXT PRIMARY KEY REFERENCES workers(id),
    node   TEXT NOT NULL REFERENCES nodes(name)
) WITHOUT ROWID;
CREATE INDEX node_workers_by_node ON node_workers(node, worker);
