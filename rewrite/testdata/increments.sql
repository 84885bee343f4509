-- case: plain increment by literal
UPDATE repos SET downloads = downloads + 1 WHERE id = 7
-- case: placeholders keep their order
UPDATE repos SET downloads = downloads + ? WHERE id = ?
-- case: delta first
UPDATE repos SET downloads = 5 + downloads WHERE id = 7
-- case: decrement
UPDATE repos SET downloads = downloads - ? WHERE id = ?
-- case: key on the left, parenthesised, LIMIT 1
update `app`.`repos` set `downloads`=`downloads`+1 where (7 = id) limit 1
-- case: comments, odd case and spacing, alias
UPDATE /* hot */ app.repos AS r SET r.DOWNLOADS = r.downloads  +  2 WHERE r.ID = 99 -- trailing
-- case: table names are case-sensitive, like the server's on Linux
UPDATE App.Repos SET downloads = downloads + 1 WHERE id = 1
-- case: two counters in one SET
UPDATE repos SET downloads = downloads + ?, stars = stars + ? WHERE id = ?
-- case: two counters, literal deltas
UPDATE repos SET downloads = downloads + 1, stars = stars + 2 WHERE id = 3
-- case: zero delta
UPDATE repos SET downloads = downloads + 0 WHERE id = 3
-- case: schema from the session
-- session: db=other
UPDATE app.repos SET downloads = downloads + 1 WHERE id = 3
-- case: unqualified name in another database is not ruled
-- session: db=other
UPDATE repos SET downloads = downloads + 1 WHERE id = 3
-- case: records found by a condition on other columns: the rows it finds, locked in share mode
UPDATE repos SET downloads = downloads + 1 WHERE name = 'x'
-- case: a condition on other columns with IN, NOT, OR, BETWEEN and IS NULL
UPDATE repos SET downloads = downloads - 2, stars = stars + 1 WHERE owner_id IN (1, 3) AND NOT (name = 'b' OR owner_id IS NULL) AND owner_id BETWEEN -1 AND 5
-- case: a condition that converts a value stays on the base column
UPDATE repos SET downloads = downloads + 1 WHERE owner_id = '3'
-- case: a condition on other columns with a LIMIT stays on the base column
UPDATE repos SET downloads = downloads + 1 WHERE name <> 'x' LIMIT 1
-- case: a condition with a placeholder on other columns stays on the base column
UPDATE repos SET downloads = downloads + 1 WHERE owner_id = ?
-- case: a CASE of deltas by another column, every row taking a branch
UPDATE repos SET downloads = CASE owner_id WHEN 1 THEN downloads - 2 WHEN 3 THEN downloads + 1 ELSE downloads END WHERE owner_id IN (1, 3)
-- case: a CASE of deltas of a DECIMAL counter by key
UPDATE stock SET qty = CASE id WHEN 1 THEN qty-2 WHEN 2 THEN qty-1 ELSE qty END WHERE (id IN (1, 2))
-- case: a CASE of deltas with another counter's increment
UPDATE repos SET stars = stars + 1, downloads = CASE name WHEN 'a' THEN downloads + 1 WHEN 'x' THEN downloads + 3 END WHERE name IN ('x', 'a')
-- case: a CASE whose ELSE some row takes stays on the base column
UPDATE repos SET downloads = CASE owner_id WHEN 1 THEN downloads - 2 ELSE downloads END WHERE owner_id IN (1, 3)
-- case: increment with IN (k1, k2): a slot row per key
UPDATE repos SET downloads = downloads + 1 WHERE id IN (1, 2)
-- case: increment plus another column stays on the base column
UPDATE repos SET downloads = downloads + 1, name = 'y' WHERE id = 3
-- case: increment by an expression reading a counter is absolute
UPDATE repos SET downloads = downloads + stars WHERE id = 3
-- case: decimal delta stays on the base column
UPDATE repos SET downloads = downloads + 1.5 WHERE id = 3
-- case: multi-statement
UPDATE repos SET downloads = downloads + 1 WHERE id = 1; SELECT downloads FROM repos WHERE id = 1
-- case: shadow rule
UPDATE pages SET views = views + 1 WHERE page_id = 3
-- case: Rails increment_counter: COALESCE, backquotes, qualified key
UPDATE `repos` SET `downloads` = COALESCE(`downloads`, 0) + 1 WHERE `repos`.`id` = 1
-- case: Rails with an id list
UPDATE `repos` SET `downloads` = COALESCE(`downloads`, 0) + 1 WHERE `repos`.`id` IN (1)
-- case: Django F() and SQLAlchemy: parenthesised, qualified
UPDATE `repos` SET `downloads` = (`repos`.`downloads` + 1) WHERE `repos`.`id` = 1
-- case: IFNULL and the delta first
UPDATE repos SET downloads = 2 + IFNULL(downloads, 0) WHERE id = 3
-- case: a string key, as PHP's emulated prepares send it
UPDATE repos SET downloads = downloads + 1 WHERE id = '1'
-- case: extra conditions: scoped and soft-deleted rows
UPDATE repos SET downloads = downloads + 1 WHERE id = ? AND owner_id = ? AND name <> 'deleted'
-- case: Laravel increment(): a touch column assigned a placeholder
update `repos` set `downloads` = `downloads` + 1, `repos`.`updated_at` = ? where `id` = ?
-- case: Sequelize increment(): two counters and a time literal
UPDATE `repos` SET `downloads`=`downloads`+ 1,`stars`=`stars`+ 2,`updated_at`='2026-11-23 23:37:11' WHERE `id` = 1
-- case: Rails touch with fractional seconds
UPDATE `repos` SET `downloads` = COALESCE(`downloads`, 0) + 1, `updated_at` = '2026-11-23 23:37:11.123456' WHERE `repos`.`id` = 2
-- case: touch columns assigned the current time, DATETIME and TIMESTAMP
UPDATE repos SET downloads = downloads + 1, updated_at = NOW(6), seen_at = CURRENT_TIMESTAMP WHERE id = 7
-- case: a touch column assigned something other than a time is a guarded write
UPDATE repos SET downloads = downloads + 1, updated_at = '2024-02-30 10:00:00' WHERE id = 1
-- case: a touch column assigned alone is a guarded write
UPDATE repos SET updated_at = NOW() WHERE id = 1
-- case: a zero increment with a touch column is a guarded write
UPDATE repos SET downloads = downloads + 0, updated_at = NOW() WHERE id = 1
-- case: another column assigned with an increment stays on the base row
UPDATE repos SET downloads = downloads + 1, name = 'x' WHERE id = 1
-- case: an integer column assigned a literal with an increment is slotted while it holds the value (phpBB)
UPDATE repos SET owner_id = 2, downloads = downloads + 1, updated_at = NOW() WHERE id = 3
-- case: an integer column assigned a literal with increments, prepared
UPDATE repos SET downloads = downloads + ?, owner_id = 1, stars = stars + 1 WHERE id = ?
-- case: LIMIT 2 with one key is slotted
UPDATE repos SET downloads = downloads + 1 WHERE id = 1 LIMIT 2
-- case: LIMIT 1 with several keys stays on the base row
UPDATE repos SET downloads = downloads + 1 WHERE id IN (1, 2) LIMIT 1
-- case: a NULL test of the counter (slotted: the total is NULL exactly when the base value is)
UPDATE repos SET downloads = downloads + 1 WHERE id = 7 AND (downloads IS NOT NULL)
-- case: a clamp at 0 of a counter that cannot be negative (slotted)
UPDATE repos SET stars = GREATEST(stars + 1, 0) WHERE id = 7
-- case: a clamp at 0 of a signed counter (on the base row)
UPDATE repos SET downloads = GREATEST(downloads + 1, 0) WHERE id = 7
-- case: a quoted integer delta (slotted as the integer)
UPDATE repos SET downloads = downloads + '101' WHERE id = 7
-- case: a quoted delta that is not one canonical integer (on the base row)
UPDATE repos SET downloads = downloads + '1e3' WHERE id = 7
-- case: a decrement of an UNSIGNED counter that stops at 0 (slotted: the bound holds whenever the slot keeps the total ≥ 0)
UPDATE repos SET stars = stars - 1 WHERE id = 8 AND stars > 0
-- case: a bound written on the left, qualified, with another condition (slotted)
UPDATE repos SET stars = stars - 2 WHERE id = 8 AND (0 < `repos`.`stars` AND stars >= 2) AND name = 'x'
-- case: a bound the range does not imply (on the base row)
UPDATE repos SET stars = stars - 1 WHERE id = 8 AND stars > 1
-- case: an upper bound at the column's maximum (slotted)
UPDATE repos SET stars = stars + 1 WHERE id = 8 AND stars < 4294967295
-- case: a bound on a signed counter (on the base row)
UPDATE repos SET downloads = downloads - 1 WHERE id = 8 AND downloads > 0
-- case: a bound on a counter the statement does not increment (on the base row)
UPDATE repos SET stars = stars - 1 WHERE id = 8 AND stars > 0 AND downloads > 5
-- case: a bound with a placeholder delta (on the base row)
UPDATE repos SET stars = stars - ? WHERE id = ? AND stars > 0
-- case: upsert of several rows
INSERT INTO repos (id, downloads) VALUES (1, 1), (4, 1) ON DUPLICATE KEY UPDATE downloads = downloads + 1
-- case: a DECIMAL counter decremented by a decimal literal (Magento's stock), in units of 0.0001
UPDATE stock SET qty = qty - 1.5 WHERE id = 1
-- case: a DECIMAL counter incremented by a placeholder
UPDATE stock SET qty = qty + ? WHERE id = ?
-- case: a DECIMAL counter read
SELECT id, qty, qty * 2 FROM stock WHERE qty IS NOT NULL ORDER BY id
-- case: a DECIMAL counter with a condition on it is a guarded write
UPDATE stock SET qty = qty - 1 WHERE id = 1 AND qty >= 1
-- case: a delta that is an expression of integer literals (planned from its values)
UPDATE repos SET downloads = downloads + ((2 * 3) - 1) WHERE id = 3
-- case: a chain of additions to the counter (c + 6) - 1 is a guarded write
UPDATE repos SET downloads = downloads + (2 * 3) - 1 WHERE id = 3
-- case: a delta expression beyond 2^53 is a guarded write
UPDATE repos SET downloads = downloads + 4611686018427387904 * 4 WHERE id = 3
-- case: a condition the rule's bounds imply (max 1000: before a successful +1 the total is at most 999)
UPDATE queries SET hits = hits + 1 WHERE id = 3 AND hits < 1000
-- case: a condition the rule's bounds do not imply runs on the base row
UPDATE queries SET hits = hits + 1 WHERE id = 3 AND hits < 999
-- case: a decrement the rule's lower bound implies a condition of
UPDATE queries SET hits = hits - 2 WHERE id = 3 AND hits >= 2
