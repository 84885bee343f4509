-- Run by TestMariaDBCLI with the mariadb command-line client, directly on
-- the plain schema and through slotproxy on the ruled one, with --force
-- (go on after errors) and --show-warnings; the outputs must be equal
-- byte for byte. Nothing here may name the schema.
SELECT id, name, downloads, stars, big FROM repos ORDER BY id;
UPDATE repos SET downloads = downloads + 1 WHERE id = 1;
UPDATE repos SET downloads = downloads + 5, stars = stars + 1 WHERE id = 2;
UPDATE repos SET downloads = downloads + 1 WHERE id = 999;
SELECT downloads FROM repos WHERE id = 1;
SELECT ROW_COUNT() >= -1 AS ok;
PREPARE inc FROM 'UPDATE repos SET downloads = downloads + ? WHERE id = ?';
SET @d = 3, @k = 3;
EXECUTE inc USING @d, @k;
DEALLOCATE PREPARE inc;
BEGIN;
UPDATE repos SET downloads = downloads + 100 WHERE id = 4;
SELECT id, downloads FROM repos WHERE id = 4;
ROLLBACK;
START TRANSACTION;
UPDATE repos SET downloads = downloads + 10 WHERE id = 4;
COMMIT;
INSERT INTO repos (id, name) VALUES (1, 'dup');
UPDATE repos SET nope = nope + 1 WHERE id = 1;
UPDATE repos SET downloads = downloads + WHERE id = 1;
SELECT CAST('7x' AS SIGNED) AS n, downloads FROM repos WHERE id = 1;
INSERT IGNORE INTO events (repo_id, kind) VALUES (1, 'a kind that is too long to fit');
UPDATE repos SET downloads = 42 WHERE id = 3;
SELECT id, name, downloads, stars, big FROM repos ORDER BY id;
SELECT owner_id, SUM(downloads) AS total FROM repos GROUP BY owner_id ORDER BY owner_id;
