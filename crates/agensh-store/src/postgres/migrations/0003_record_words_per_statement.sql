-- Schema 3 of the PostgreSQL store: the prefix vocabulary `record_words` kept once per
-- statement instead of once per row. The writer stores a group's board records with one
-- statement (postgres/board.rs, `append_batch`); the trigger for each row ran one
-- INSERT … ON CONFLICT per record, this one runs one for every record the statement
-- inserted (its transition table), whoever inserts them. The words kept are the same.
CREATE OR REPLACE FUNCTION agensh_record_words() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO record_words(word) SELECT DISTINCT unnest(words) FROM new_records
        ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS records_words_kept ON records;
CREATE TRIGGER records_words_kept AFTER INSERT ON records
    REFERENCING NEW TABLE AS new_records
    FOR EACH STATEMENT EXECUTE FUNCTION agensh_record_words();
