-- case: point select
SELECT downloads FROM repos WHERE id = ?
-- case: qualified column keeps its name
SELECT r.downloads, r.name FROM app.repos r WHERE r.id = 1
-- case: expression gets the original text as its name
SELECT downloads+1, stars * 2 AS s FROM repos
-- case: star expands from the column list
SELECT * FROM repos WHERE id = 1
-- case: t.* and another table's star
SELECT r.*, u.* FROM repos r JOIN users u ON u.id = r.owner_id
-- case: where, order by, group by, having
SELECT owner_id, SUM(downloads) FROM repos WHERE stars > 10 GROUP BY owner_id HAVING SUM(downloads) > 5 ORDER BY MAX(downloads) DESC
-- case: group by a counter (MySQL's ONLY_FULL_GROUP_BY, on by default)
SELECT downloads, COUNT(*) FROM repos GROUP BY downloads ORDER BY downloads
-- case: group by a counter with a qualified name and an alias
SELECT r.downloads AS d, COUNT(*) FROM repos r GROUP BY r.downloads HAVING COUNT(*) > 0
-- case: group by a counter's position
SELECT downloads, COUNT(*) FROM repos GROUP BY 1
-- case: group by a counter that is not selected
SELECT COUNT(*) FROM repos GROUP BY downloads
-- case: group by a counter after a wildcard keeps the expression
SELECT *, COUNT(*) FROM repos GROUP BY id, downloads
-- case: group by two counters, one of them selected
SELECT stars, COUNT(*) FROM repos GROUP BY downloads, stars ORDER BY stars DESC
-- case: order by a grouped counter that is not selected (known limitation on MySQL)
-- session: fails_on=mysql:1055
SELECT stars, COUNT(*) FROM repos GROUP BY downloads, stars ORDER BY downloads
-- case: order by a select alias is left alone
SELECT name AS downloads FROM repos ORDER BY downloads
-- case: join condition and the other table's same-named column
SELECT u.downloads, r.downloads FROM users u JOIN repos r ON r.downloads > u.downloads
-- case: subquery and correlated reference
SELECT name FROM repos r WHERE downloads > (SELECT AVG(downloads) FROM repos) AND EXISTS (SELECT 1 FROM users u WHERE u.id = r.owner_id AND r.stars > 0)
-- case: derived table
SELECT x.d FROM (SELECT downloads AS d FROM repos) AS x
-- case: insert select
INSERT INTO users (id, name, downloads) SELECT id, name, downloads FROM repos
-- case: update of another table reading a counter
UPDATE users u SET u.downloads = (SELECT downloads FROM repos WHERE id = u.id)
-- case: for update
SELECT downloads FROM repos WHERE id = 1 FOR UPDATE
-- case: lock in share mode keeps its text
SELECT /*+ MAX_EXECUTION_TIME(100) */ downloads FROM repos WHERE id = 1 LOCK IN SHARE MODE
-- case: string literals and comments are untouched
SELECT 'downloads\'s', downloads /* downloads */ FROM repos WHERE name = "a\\b"
-- case: ANSI_QUOTES
-- session: ansi_quotes
SELECT "downloads" FROM "repos" WHERE "id" = 1
-- case: no counter read
SELECT name FROM repos WHERE id = 1
-- case: other table only
SELECT downloads FROM users
-- case: union
SELECT downloads FROM repos WHERE id = 1 UNION ALL SELECT downloads FROM users WHERE id = 1
-- case: count star needs no expansion
SELECT COUNT(*) FROM repos
-- case: explain passes through
EXPLAIN SELECT downloads FROM repos
-- case: does not parse
SELECT downloads FROM repos WHERE
-- case: names no ruled table
SELECT 1
-- case: shadow rule read
SELECT views FROM pages WHERE page_id = 1
-- case: a subquery over a table of unknown columns is not resolved outward
SELECT (SELECT downloads FROM other.t LIMIT 1) FROM repos
-- case: a derived table may define the name
SELECT (SELECT downloads FROM (SELECT 1 AS downloads) AS d) FROM repos
-- case: a correlated reference through a known table still resolves outward
SELECT (SELECT MAX(u.id) FROM users u WHERE u.name = r.name AND stars > 1) FROM repos r
-- case: a read of a shadow and an active table is rewritten
SELECT p.views, r.downloads FROM pages p JOIN repos r ON r.id = p.page_id
-- case: a touch column reads as the latest of base and slots
SELECT id, updated_at, seen_at FROM repos WHERE id = 1
-- case: a touch column in a condition
SELECT id FROM repos WHERE updated_at > '2024-03-01 00:00:00' ORDER BY id
-- case: NATURAL JOIN with a ruled table is refused
SELECT downloads FROM repos NATURAL JOIN users
-- case: a CTE reads the ruled table; the outer query reads the CTE
WITH repos AS (SELECT id, downloads FROM repos) SELECT downloads FROM repos WHERE id = 1
-- case: CTEs after the first see it, recursive ones see themselves
WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3), repos AS (SELECT n AS downloads FROM r) SELECT SUM(downloads) FROM repos
-- case: a CTE named like a ruled table in a UNION
WITH repos AS (SELECT 1 AS downloads) SELECT downloads FROM repos UNION ALL SELECT downloads FROM app.repos WHERE id = 1
-- case: the slot table is not readable through the proxy
SELECT * FROM slotted_counters
-- case: nor writable
INSERT INTO app.slotted_counters VALUES (1, 1, 0, 5)
-- case: rolled-up reads: a plain read of a rolled-up counter is the statement as written
SELECT n FROM likes WHERE id = 1
-- case: rolled-up reads: a wildcard is not expanded
SELECT * FROM likes ORDER BY id
-- case: rolled-up reads: an exact counter beside a rolled-up one is still read exactly
SELECT l.n, r.downloads FROM likes l JOIN repos r ON r.id = l.id
-- case: rolled-up reads: a locking read is exact
SELECT n FROM likes WHERE id = 1 FOR UPDATE
-- case: rolled-up reads: a union that locks is exact
SELECT n FROM likes WHERE id = 1 UNION SELECT n FROM likes WHERE id = 2 FOR UPDATE
-- case: rolled-up reads: a read inside a write is exact
INSERT INTO users (id, name, downloads) SELECT id, 'x', n FROM likes WHERE id = 1
-- case: rolled-up reads: increments are slotted as in exact mode
UPDATE likes SET n = n + 1 WHERE id = 1
-- case: a null test of a counter reads its base column (a total is NULL exactly when its base value is): as written
SELECT id FROM repos WHERE downloads IS NULL ORDER BY id
-- case: a null test beside a read of the total
SELECT id, downloads FROM repos WHERE downloads IS NOT NULL AND stars IS NULL
