-- A CLAIM that took over another: the new claim, the old one, the old claim's author and
-- why it could be taken (`released`, `dead`, `stopped`, `expired`). A claim is taken over
-- at most once (`old` is unique).
CREATE TABLE takeovers (
    seq        INTEGER PRIMARY KEY REFERENCES records(seq),
    old        INTEGER NOT NULL UNIQUE REFERENCES records(seq),
    old_author TEXT NOT NULL,
    why        TEXT NOT NULL
);
