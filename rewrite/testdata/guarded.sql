-- case: absolute assignment
UPDATE repos SET downloads = 0 WHERE id = 5
-- case: absolute assignment with placeholders
UPDATE repos SET downloads = ?, name = ? WHERE id = ?
-- case: assignment from another column
UPDATE repos SET stars = owner_id WHERE name = 'x' ORDER BY id LIMIT 10
-- case: assignment reading itself non-additively
UPDATE repos r SET r.downloads = r.downloads * 2 WHERE r.downloads > ?
-- case: delete
DELETE FROM repos WHERE id = ?
-- case: delete by counter value
DELETE FROM repos WHERE downloads < 10 LIMIT 5
-- case: delete everything
DELETE FROM repos
-- case: replace
REPLACE INTO repos (id, name, downloads, stars) VALUES (1, 'a', 0, 0), (?, ?, ?, ?)
-- case: upsert with absolute assignment
INSERT INTO repos (id, downloads) VALUES (3, 10) ON DUPLICATE KEY UPDATE downloads = VALUES(downloads)
-- case: upsert with increment: slotted when the record exists
INSERT INTO repos (id, downloads) VALUES (3, 1) ON DUPLICATE KEY UPDATE downloads = downloads + 1
-- case: upsert incrementing two counters, one by VALUES()
INSERT INTO repos (id, downloads, stars) VALUES (1, 4, 0) ON DUPLICATE KEY UPDATE downloads = downloads + VALUES(downloads), stars = stars + 1
-- case: upsert naming a string column whose literal fits it (the row it builds cannot fail): slotted
INSERT INTO repos (id, name, downloads) VALUES (2, 'x', 1) ON DUPLICATE KEY UPDATE downloads = downloads + 1
-- case: upsert of several rows: guarded
INSERT INTO repos (id, downloads) VALUES (1, 1), (2, 1) ON DUPLICATE KEY UPDATE downloads = downloads + 1
-- case: plain insert
INSERT INTO repos (id, name) VALUES (1, 'x')
-- case: truncate
TRUNCATE TABLE repos
-- case: alter
ALTER TABLE repos ADD COLUMN extra INT
-- case: multi-table update of a counter
UPDATE repos r JOIN users u ON u.id = r.owner_id SET r.downloads = 0
-- case: multi-table delete
DELETE r FROM repos r JOIN users u ON u.id = r.owner_id WHERE u.name = 'gone'
-- case: multi-table delete that only reads the ruled table
DELETE u FROM users u JOIN repos r ON r.owner_id = u.id WHERE r.downloads > 5
-- case: multi-table update assigning counters of two ruled tables passes through
UPDATE repos r JOIN pages p ON p.page_id = r.id SET r.downloads = 0, p.views = 0
-- case: INSERT … SELECT with ON DUPLICATE KEY UPDATE of a counter folds the whole table
INSERT INTO repos (id, name) SELECT id, name FROM users ON DUPLICATE KEY UPDATE downloads = 0
-- case: REPLACE without the key folds the whole table
REPLACE INTO repos (name, downloads) VALUES ('x', 1)
-- case: upsert leaving out an AUTO_INCREMENT key: slotted in autocommit when its UNIQUE key's row exists, else guarded by those values
INSERT INTO queries (store, q, hits) VALUES (1, 'red shoes', 1) ON DUPLICATE KEY UPDATE hits = hits + 1
-- case: REPLACE leaving out an AUTO_INCREMENT key, prepared: guarded by its UNIQUE key's values
REPLACE INTO queries (q, store, hits) VALUES (?, ?, 40)
-- case: upsert leaving out an AUTO_INCREMENT key and its UNIQUE key's NULL column: conflicts with no row
INSERT INTO queries (store, hits) VALUES (1, 1) ON DUPLICATE KEY UPDATE hits = hits + 1
-- case: upsert whose key is an expression folds the whole table
INSERT INTO repos (id, name) VALUES (1 + 1, 'x') ON DUPLICATE KEY UPDATE stars = 0
-- case: rename reloads the catalog
RENAME TABLE repos TO repos_old, users TO repos
-- case: create index reloads the catalog
CREATE INDEX by_name ON repos (name)
-- case: drop of another table
DROP TABLE users
-- case: drop of a ruled table clears its slots after it (a dump restored under the name starts from its own values)
DROP TABLE IF EXISTS repos
-- case: drop of two ruled tables in one statement is refused
DROP TABLE repos, pages
-- case: a backslash is not an escape under NO_BACKSLASH_ESCAPES: no statement is smuggled into the guard
-- session: no_backslash_escapes
UPDATE repos SET downloads = 7 WHERE name = 'x\'; UPDATE users SET downloads = downloads + 1 WHERE id = 2 -- '
-- case: delete returning a counter (MariaDB 10.5+): folded first, so the clause returns the total
DELETE FROM repos WHERE id = ? RETURNING id, downloads
-- case: replace returning a counter
REPLACE INTO repos (id, name, downloads, stars) VALUES (1, 'a', 0, 0) RETURNING id, downloads
-- case: insert returning a counter of the new row
INSERT INTO repos (id, name) VALUES (9, 'x') RETURNING id, downloads
-- case: RETURNING in a comment is not a clause
DELETE FROM repos WHERE id = 1 -- RETURNING x
OR id = 2
-- case: a RETURNING clause followed by another statement is not planned
DELETE FROM repos WHERE id = 1 RETURNING downloads; SELECT downloads FROM repos
-- case: an older time written to a touch column folds first
UPDATE repos SET updated_at = '2020-01-01 00:00:00' WHERE id = 1
-- case: a key change folds the record's slots first
UPDATE repos SET id = 50 WHERE id = 1
-- case: an upsert that changes the key folds first
INSERT INTO repos (id, name) VALUES (2, 'b') ON DUPLICATE KEY UPDATE id = 60
-- case: a multi-table DELETE from two ruled tables folds both
DELETE r, p FROM repos r JOIN pages p ON p.page_id = r.id WHERE r.id = 3
-- case: a write of other columns (refreshed first in a transaction's snapshot)
UPDATE repos SET name = ? WHERE id = ?
-- case: a write of other columns by a condition on a counter
UPDATE repos SET name = 'hot' WHERE downloads > 1000
-- case: an upsert of other columns
INSERT INTO repos (id, name) VALUES (?, ?) ON DUPLICATE KEY UPDATE name = VALUES(name)
-- case: an absolute write of a DECIMAL counter folds its units first
UPDATE stock SET qty = 7.25 WHERE id = 1
