-- Schema 2 of the PostgreSQL store: the prefix vocabulary `record_words`.
-- Idempotent like step 1 (a database that already has the table keeps it as it is).
-- Prefix grep (`pars*`, postgres/search.rs): every distinct word of every record, under a
-- byte-order btree (COLLATE "C", its primary key), so the words starting with a prefix are
-- one range scan; the records holding any of them are then found through `records_words`
-- (GIN, `&&`). Kept by a trigger on `records`, whoever inserts them; words are never
-- removed (a word no record holds matches nothing). When the table is new, the trigger is
-- made first — its lock on `records` waits for writes in flight and holds off new ones —
-- and then every stored record's words are copied, all in this block's transaction.
CREATE OR REPLACE FUNCTION agensh_record_words() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO record_words(word) SELECT DISTINCT unnest(NEW.words) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
DO $$
BEGIN
    IF to_regclass('record_words') IS NULL THEN
        CREATE TABLE record_words (word TEXT COLLATE "C" PRIMARY KEY);
        CREATE TRIGGER records_words_kept AFTER INSERT ON records
            FOR EACH ROW EXECUTE FUNCTION agensh_record_words();
        INSERT INTO record_words(word) SELECT DISTINCT unnest(words) FROM records;
    END IF;
END
$$;
