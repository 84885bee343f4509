-- Run once by the mysql image when it creates its data directory
-- (docker-compose.yml mounts this file into /docker-entrypoint-initdb.d):
-- the table of the example rule testdata/rules/repos.yaml, with 1000 rows.
USE app;
CREATE TABLE repos (
  id        BIGINT NOT NULL PRIMARY KEY,
  name      VARCHAR(100) NOT NULL DEFAULT '',
  downloads BIGINT NOT NULL DEFAULT 0
) ENGINE=InnoDB;
INSERT INTO repos (id, name)
  WITH RECURSIVE n (id) AS (SELECT 1 UNION ALL SELECT id + 1 FROM n WHERE id < 1000)
  SELECT id, CONCAT('repo-', id) FROM n;
