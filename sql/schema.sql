-- The shortener's schema. The app runs this file at start (it is embedded in
-- the binary), so every statement must be safe to run again. Since step 27
-- it runs only when the file has changed (schema_version, below); since
-- step 45 the indexes at its end are built CONCURRENTLY, after the rest.
--
-- Step 02: the table, with no index on code.
CREATE TABLE IF NOT EXISTS links (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code       text        NOT NULL,
    url        text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Step 03: a unique index on code. Lookups become an index probe instead of
-- a table scan, and the database itself now refuses a duplicate code, which
-- lets the app insert with ON CONFLICT DO NOTHING instead of checking first.
-- (On a table that already holds a duplicate code, which step 02's
-- check-then-insert could in theory produce, this fails and says which.)
CREATE UNIQUE INDEX IF NOT EXISTS links_code_key ON links (code);

-- Step 07: clicks. The app sums clicks per code in memory and adds each
-- batch in one statement, one row per code (CLICK_STORAGE=counts, the
-- default).
CREATE TABLE IF NOT EXISTS click_counts (
    code   text   PRIMARY KEY,
    clicks bigint NOT NULL
);

-- Step 07, the alternative it was measured against (CLICK_STORAGE=rows):
-- one row per click, which keeps when each click happened.
CREATE TABLE IF NOT EXISTS click_events (
    id   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code text        NOT NULL,
    at   timestamptz NOT NULL DEFAULT now()
);
-- Its index on code: at the end of this file.

-- Step 15: a BRIN index on created_at, for the Bloom filter's resync, which
-- reads the codes created since its feed of creates went down. Rows are
-- appended in created_at order, so a summary (least and greatest) of each
-- range of pages finds the recent ones, at a few kilobytes where a B-tree
-- would take as much as the table's codes. At the end of this file.
-- Step 16: links that change. A link may expire at a time or after a number
-- of clicks, answers with the redirect status it was made with, and can be
-- edited or deleted by whoever holds its token (only its SHA-256 is kept).
-- A delete keeps the row, marked and with its URL blanked, so that a code
-- is never given out again: a printed old link never leads somewhere new.
-- version goes up by one on every edit and delete; the Redis cache keeps
-- it beside the link, so that a stale value can never overwrite a newer
-- one (cache.go). Links made before these columns have no token: they
-- cannot be edited.
ALTER TABLE links ADD COLUMN IF NOT EXISTS expires_at timestamptz NULL;
ALTER TABLE links ADD COLUMN IF NOT EXISTS max_clicks bigint      NULL;
ALTER TABLE links ADD COLUMN IF NOT EXISTS redirect   smallint    NOT NULL DEFAULT 302;
ALTER TABLE links ADD COLUMN IF NOT EXISTS token_hash bytea       NULL;
ALTER TABLE links ADD COLUMN IF NOT EXISTS deleted_at timestamptz NULL;
ALTER TABLE links ADD COLUMN IF NOT EXISTS version    bigint      NOT NULL DEFAULT 1;
-- A CHECK cannot be added "IF NOT EXISTS"; adding one that is there
-- already fails with duplicate_object, which is caught, so that a restart
-- does not scan the table again.
DO $$ BEGIN
    ALTER TABLE links ADD CONSTRAINT links_redirect_check CHECK (redirect IN (301, 302, 307, 308));
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;
DO $$ BEGIN
    ALTER TABLE links ADD CONSTRAINT links_max_clicks_check CHECK (max_clicks >= 1);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;
-- Step 17: what people see of their links. The click workers sum the
-- clicks by link and hour, and by link and day, in memory, and add the
-- sums here every STATS_FLUSH; nothing is written per click. A day's row
-- also holds its visitors as a HyperLogLog sketch (of their addresses
-- hashed with the code under that day's key: never the address), its
-- referrer hosts (at most STATS_TOP entries, (other) summing those cut)
-- and its clients by class. Both tables are partitioned by
-- month, so that the months past their retention are dropped whole
-- (stats_postgres.go makes and drops the partitions).
CREATE TABLE IF NOT EXISTS click_hours (
    code   text        NOT NULL,
    hour   timestamptz NOT NULL,
    people integer     NOT NULL DEFAULT 0,
    bots   integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (code, hour)
) PARTITION BY RANGE (hour);
CREATE TABLE IF NOT EXISTS click_days (
    code      text   NOT NULL,
    day       date   NOT NULL,
    people    bigint NOT NULL DEFAULT 0,
    bots      bigint NOT NULL DEFAULT 0,
    uniques   bytea  NOT NULL DEFAULT '',
    referrers jsonb  NOT NULL DEFAULT '{}',
    agents    jsonb  NOT NULL DEFAULT '{}',
    PRIMARY KEY (code, day)
) PARTITION BY RANGE (day);
-- The key each day's visitors are hashed with, made by the first instance
-- that needs it and deleted when the next day is over.
CREATE TABLE IF NOT EXISTS stats_keys (
    day date  PRIMARY KEY,
    key bytea NOT NULL
);
-- Step 18: codes unique by construction (CODES=sequence). Each instance
-- takes a block of 1,000 numbers from this sequence at a time (one
-- nextval is block n: numbers 1000n to 1000n+999), and turns each number
-- into a code through a keyed permutation; the key, 16 random bytes, is
-- made by the first instance to start and read by all (codes.go).
CREATE SEQUENCE IF NOT EXISTS link_code_blocks;
CREATE TABLE IF NOT EXISTS code_keys (
    id  integer PRIMARY KEY CHECK (id = 1),
    key bytea   NOT NULL CHECK (length(key) = 16)
);

-- Step 26: the key that signs what the app writes to Redis (cache values,
-- the feed's messages) and checks what it reads back: 32 random bytes,
-- made by the first instance to start and read by all (redisauth.go).
-- Whoever can write to Redis but not read this table cannot forge a value.
-- To change it: DELETE FROM redis_keys, then restart every instance; until
-- the last has restarted, values one key wrote are misses for the other.
CREATE TABLE IF NOT EXISTS redis_keys (
    id  integer PRIMARY KEY CHECK (id = 1),
    key bytea   NOT NULL CHECK (length(key) = 32)
);

-- Step 27: the version of this file last applied, as its SHA-256. An
-- instance that starts with the same file finds it here and runs no DDL:
-- until step 27 every start ran this file, and its ALTER TABLEs queued for
-- an exclusive lock on links behind any long reader (pg_dump, a report),
-- with every lookup and create queued behind them (docs/27).
CREATE TABLE IF NOT EXISTS schema_version (
    id      integer     PRIMARY KEY CHECK (id = 1),
    sha256  text        NOT NULL,
    applied timestamptz NOT NULL DEFAULT now()
);

-- Step 30: every statement that adds links tells every instance, whoever
-- ran it (the app, `shortener import`, psql): at its commit, and only if
-- it commits, Postgres sends the codes on channel links_created, to each
-- instance's LISTEN (linklisten.go). The codes go by name, separated by
-- spaces, 200 to a message (the app's codes are at most 32 characters);
-- a statement of more than 10,000 rows (a bulk COPY) sends one "*"
-- instead, which tells each instance to read every code again, and so
-- does a message that would be 8,000 bytes or more (NOTIFY's limit: past
-- it, pg_notify fails, and with it the INSERT). Once per statement, not
-- per row.
CREATE OR REPLACE FUNCTION links_announce() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    n       integer;
    payload text;
BEGIN
    -- The usual statement (a create, a group commit's batch) in one query.
    SELECT count(*), string_agg(code, ' ') INTO n, payload
    FROM (SELECT code FROM added LIMIT 201) AS first_rows;
    IF n = 0 THEN
        RETURN NULL;
    END IF;
    IF n <= 200 AND octet_length(payload) < 8000 THEN
        PERFORM pg_notify('links_created', payload);
        RETURN NULL;
    END IF;
    SELECT count(*) INTO n FROM (SELECT 1 FROM added LIMIT 10001) AS first_rows;
    IF n > 10000 OR EXISTS (SELECT 1 FROM added WHERE octet_length(code) > 32) THEN
        PERFORM pg_notify('links_created', '*');
        RETURN NULL;
    END IF;
    FOR payload IN
        SELECT string_agg(code, ' ')
        FROM (SELECT code, (row_number() OVER () - 1) / 200 AS part FROM added) AS numbered
        GROUP BY part
    LOOP
        PERFORM pg_notify('links_created', payload);
    END LOOP;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER links_announce
    AFTER INSERT ON links REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION links_announce();

-- Step 49: every statement that edits links tells every instance too,
-- whoever ran it: an operator's psql UPDATE of a phishing link, or an
-- instance killed between its change's COMMIT and its PUBLISH. At commit
-- Postgres sends the codes on channel links_changed; each instance drops
-- them from its memory and tells Redis what the primary now has
-- (linklisten.go). The same messages as links_created's: 200 codes to
-- one, "*" past 10,000 rows. The codes before and after the statement:
-- an UPDATE that renames a code makes the old one stop answering too.
CREATE OR REPLACE FUNCTION links_announce_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    n       integer;
    payload text;
BEGIN
    SELECT count(*), string_agg(code, ' ') INTO n, payload
    FROM (SELECT code FROM (SELECT code FROM changed UNION SELECT code FROM was) AS codes LIMIT 201) AS first_rows;
    IF n = 0 THEN
        RETURN NULL;
    END IF;
    IF n <= 200 AND octet_length(payload) < 8000 THEN
        PERFORM pg_notify('links_changed', payload);
        RETURN NULL;
    END IF;
    SELECT count(*) INTO n FROM (SELECT code FROM changed UNION SELECT code FROM was LIMIT 10001) AS first_rows;
    IF n > 10000 OR EXISTS (SELECT 1 FROM changed WHERE octet_length(code) > 32)
            OR EXISTS (SELECT 1 FROM was WHERE octet_length(code) > 32) THEN
        PERFORM pg_notify('links_changed', '*');
        RETURN NULL;
    END IF;
    FOR payload IN
        SELECT string_agg(code, ' ')
        FROM (SELECT code, (row_number() OVER () - 1) / 200 AS part
              FROM (SELECT code FROM changed UNION SELECT code FROM was) AS codes) AS numbered
        GROUP BY part
    LOOP
        PERFORM pg_notify('links_changed', payload);
    END LOOP;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER links_announce_change
    AFTER UPDATE ON links REFERENCING OLD TABLE AS was NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION links_announce_change();
-- A row is never deleted (step 16: a code is never given out again, and
-- a delete is an UPDATE that marks it). A DELETE, which would also leave
-- Redis serving the link, is refused with the UPDATE to run instead; so
-- is a TRUNCATE (since step 50), which fires no DELETE trigger.
CREATE OR REPLACE FUNCTION links_keep_rows() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'links are never deleted, so that a code is never given out again'
        USING ERRCODE = 'restrict_violation',
              HINT = 'mark them instead: UPDATE links SET url = '''', deleted_at = now() WHERE ...';
END
$$;
CREATE OR REPLACE TRIGGER links_keep_rows
    BEFORE DELETE ON links
    FOR EACH STATEMENT EXECUTE FUNCTION links_keep_rows();
CREATE OR REPLACE TRIGGER links_keep_all_rows
    BEFORE TRUNCATE ON links
    FOR EACH STATEMENT EXECUTE FUNCTION links_keep_rows();
-- Redis keeps each link beside its version, and refuses to write an
-- older one over a newer (cache.go). The app adds one to version on every
-- change; an UPDATE that does not (psql's) gets one added here, so that
-- what an instance re-reads after hearing of it is newer than what a
-- lookup read before it, and the older cannot win in Redis.
CREATE OR REPLACE FUNCTION links_next_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.version <= OLD.version THEN
        NEW.version := OLD.version + 1;
    END IF;
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER links_next_version
    BEFORE UPDATE ON links
    FOR EACH ROW EXECUTE FUNCTION links_next_version();
-- Step 50: these triggers fire whatever the session's replication role.
-- A trigger made as above fires only in the default role, "origin": a
-- session that sets session_replication_role = replica (a logical
-- replication's apply runs so, and a superuser may set it by hand, a
-- common way for a loading script to skip triggers) edited and deleted
-- links with none of them: no instance heard, no version was added,
-- nothing refused. ALWAYS makes them fire in every role. Only an ALTER
-- TABLE ... DISABLE TRIGGER (the table's owner's, or pg_restore's with
-- --disable-triggers) stops them now, or an ENABLE TRIGGER (pg_restore's
-- ENABLE TRIGGER ALL after it) that sets them back to the default; the
-- app's next start puts them right (pgschema.go, schemaCurrent).
-- These come after the CREATE OR REPLACE TRIGGERs above, which set a
-- trigger back to the default each time this file runs.
ALTER TABLE links ENABLE ALWAYS TRIGGER links_announce;
ALTER TABLE links ENABLE ALWAYS TRIGGER links_announce_change;
ALTER TABLE links ENABLE ALWAYS TRIGGER links_keep_rows;
ALTER TABLE links ENABLE ALWAYS TRIGGER links_keep_all_rows;
ALTER TABLE links ENABLE ALWAYS TRIGGER links_next_version;

-- Step 45: indexes. A plain CREATE INDEX takes a SHARE lock on its table,
-- and every insert, edit and delete waits behind it for as long as the
-- index builds; on a table that already holds millions of rows that is
-- seconds of failed creates on every instance. Each statement below runs
-- on its own, outside a transaction, after the statements above have
-- committed, and builds its index CONCURRENTLY: writes go on beside it.
-- An index a cut-short build left INVALID is dropped and built again
-- (pgschema.go, buildIndex). Only CREATE [UNIQUE] INDEX CONCURRENTLY IF
-- NOT EXISTS below the next line: the app refuses anything else there.
-- Built CONCURRENTLY, each on its own, after the statements above have committed.
CREATE INDEX CONCURRENTLY IF NOT EXISTS click_events_code ON click_events (code);
CREATE INDEX CONCURRENTLY IF NOT EXISTS links_created_at_brin ON links USING brin (created_at);
