-- case: TABLE statement reads every counter
TABLE repos
-- case: LOAD DATA REPLACE into a ruled table
LOAD DATA INFILE '@TMPDIR@/x.csv' REPLACE INTO TABLE repos
-- case: LOAD DATA LOCAL REPLACE into a ruled table
LOAD DATA LOCAL INFILE '@TMPDIR@/x.csv' REPLACE INTO TABLE repos
-- case: LOAD DATA IGNORE into a ruled table
LOAD DATA INFILE '@TMPDIR@/x.csv' IGNORE INTO TABLE repos
-- case: CREATE VIEW over counters
CREATE VIEW v AS SELECT id, downloads FROM repos
-- case: CREATE VIEW over counters with a column list (MySQL: refused)
CREATE VIEW v (a, b) AS SELECT id, downloads FROM repos
-- case: CREATE TABLE AS SELECT of counters
CREATE TABLE copy AS SELECT id, downloads FROM repos
-- case: PREPARE of a write
PREPARE s FROM 'UPDATE repos SET downloads = 100 WHERE id = 1'
-- case: PREPARE of a read
PREPARE s FROM 'SELECT downloads FROM repos WHERE id = ?'
-- case: LOCK TABLES WRITE
LOCK TABLES repos WRITE
-- case: SELECT INTO OUTFILE
SELECT downloads FROM repos WHERE id = 1 INTO OUTFILE '@TMPDIR@/out'
-- case: INSERT SELECT from a ruled table into another
INSERT INTO users (id, name) SELECT id, downloads FROM repos
-- case: SELECT INTO user variables reads the total
SELECT downloads INTO @d FROM repos WHERE id = 1
-- case: SELECT INTO after the WHERE, several variables
SELECT downloads, stars FROM repos WHERE id = 1 INTO @d, @s
-- case: SELECT INTO after a locking clause
SELECT downloads FROM repos WHERE id = 1 FOR UPDATE INTO @d
-- case: SELECT INTO DUMPFILE
SELECT downloads FROM repos WHERE id = 1 INTO DUMPFILE '@TMPDIR@/d'
-- case: INSERT with a row alias is guarded and keeps its alias
INSERT INTO repos (id, downloads) VALUES (1, 5) AS new ON DUPLICATE KEY UPDATE downloads = new.downloads
-- case: INSERT with a row alias and column aliases
INSERT INTO repos (id, downloads) VALUES (1, 5) AS new (i, d) ON DUPLICATE KEY UPDATE downloads = d
-- case: upsert increment with a row alias (Laravel's): on MySQL its record is incremented in a slot
insert into `repos` (`id`, `downloads`) values (7, 1) as laravel_upsert_alias on duplicate key update `downloads` = `repos`.`downloads` + 1
-- case: upsert increment with a row alias naming the counter unqualified (ambiguous: the server refuses it) stays guarded
insert into `repos` (`id`, `downloads`) values (7, 1) as laravel_upsert_alias on duplicate key update `downloads` = downloads + 1
-- case: upsert increment by the row alias's value
INSERT INTO repos (id, downloads) VALUES (1, 5) AS new ON DUPLICATE KEY UPDATE downloads = repos.downloads + new.downloads
-- case: upsert increment by the row alias's column alias
INSERT INTO repos (id, downloads) VALUES (1, 5) AS new (i, d) ON DUPLICATE KEY UPDATE downloads = downloads + new.d
-- case: upsert increment by an unqualified column alias stays guarded
INSERT INTO repos (id, downloads) VALUES (1, 5) AS new (i, d) ON DUPLICATE KEY UPDATE downloads = downloads + d
-- case: EXECUTE IMMEDIATE of an increment is the increment
EXECUTE IMMEDIATE 'UPDATE repos SET downloads = downloads + 1 WHERE id = 1'
-- case: EXECUTE IMMEDIATE of a read
EXECUTE IMMEDIATE 'SELECT downloads FROM repos WHERE id = 1'
-- case: EXECUTE IMMEDIATE with USING names a ruled table: not parsed
EXECUTE IMMEDIATE 'SELECT downloads FROM repos WHERE id = ?' USING 1
-- case: a statement naming a ruled table that does not parse
HANDLER repos OPEN
-- case: a statement that does not parse and names no ruled table passes through
HANDLER users OPEN
-- case: TABLE inside a union is refused
SELECT * FROM repos UNION TABLE repos
-- case: PREPARE of a locking read
PREPARE s FROM 'SELECT downloads FROM repos WHERE id = 1 FOR UPDATE'
-- case: PREPARE from a variable
PREPARE s FROM @q
-- case: LOCK TABLES of a ruled table locks its slot table with it
LOCK TABLES repos READ, users WRITE
-- case: LOCK TABLES with an alias (which the parser does not take) and a wait
LOCK TABLES repos AS r WRITE, repos WRITE, pages READ LOCAL
-- case: LOCK TABLES of the slot table is refused
LOCK TABLES slotted_counters WRITE
