-- Fills links with :rows links (default 500,000) whose codes are in the
-- app's format and the same on every machine, so that a benchmark can name
-- a code in the middle of the table and a table scan has real work to do.
--
--   psql "$DATABASE_URL" -f sql/seed.sql                # 500,000 links
--   psql "$DATABASE_URL" -v rows=10000 -f sql/seed.sql  # fewer
--
-- Link n gets url https://example.com/seed/n and the code that writes
-- n * 1000000007 mod 62^7 in base62, seven digits. 1000000007 is prime and
-- shares no factor with 62^7, so n -> code is one-to-one: no two seeded links
-- share a code. The middle link of 500,000, n = 250000, has the code 'zOC1qfw';
-- link 1 has '015ftgN' (the code of n does not depend on :rows).
-- Run it once on a fresh database; it does nothing if link 1 is there.
\if :{?rows}
\else
\set rows 500000
\endif
\set ON_ERROR_STOP on

INSERT INTO links (code, url)
SELECT c.code, 'https://example.com/seed/' || g.n
FROM generate_series(1, :rows) AS g(n)
CROSS JOIN LATERAL (
    SELECT string_agg(
               substr('0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz',
                      ((g.n::bigint * 1000000007 % 3521614606208) / power(62, d)::bigint % 62)::int + 1, 1),
               '' ORDER BY d DESC) AS code
    FROM generate_series(0, 6) AS d
) AS c
WHERE NOT EXISTS (SELECT 1 FROM links WHERE url = 'https://example.com/seed/1');

ANALYZE links;
