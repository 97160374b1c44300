-- A broadcast can leave out one worker (the one told directly instead).

ALTER TABLE events ADD COLUMN except_worker TEXT;
