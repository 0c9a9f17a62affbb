-- The shortener's schema. The app runs this file at start (it is embedded in
-- the binary), so every statement must be safe to run again.
--
-- Step 02: no index on code. Every lookup reads the whole table; that is the
-- point of this step, and step 03 adds the index.
CREATE TABLE IF NOT EXISTS links (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code       text        NOT NULL,
    url        text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
