-- case: keyed increment by the whole key, columns in another order
UPDATE members SET msgs = msgs + 1 WHERE user_id = 1 AND channel = 'a'
-- case: keyed increment with placeholders
UPDATE members SET msgs = msgs + ? WHERE channel = ? AND user_id = ?
-- case: keyed increment with another condition
UPDATE members SET msgs = msgs + 2 WHERE channel = 'a' AND user_id = 1 AND note IS NULL
-- case: keyed increment naming part of the key: the rows the condition finds
UPDATE members SET msgs = msgs + 1 WHERE channel = 'a'
-- case: keyed increment of several records by IN lists: the rows the condition finds
UPDATE members SET msgs = msgs + 1 WHERE channel IN ('a', 'b') AND user_id IN (1, 2)
-- case: keyed read of every column
SELECT * FROM members ORDER BY channel, user_id
-- case: keyed read by the key, aliased
SELECT m.msgs FROM members AS m WHERE m.channel = 'A' AND m.user_id = 1
-- case: keyed aggregate and join
SELECT m.channel, SUM(m.msgs) FROM members m JOIN members o ON o.channel = m.channel GROUP BY m.channel
-- case: keyed locking read
SELECT msgs FROM members WHERE channel = 'a' AND user_id = 1 FOR UPDATE
-- case: keyed absolute write by the key
UPDATE members SET msgs = 100 WHERE channel = 'b' AND user_id = 2
-- case: keyed key change
UPDATE members SET channel = 'c' WHERE channel = 'a' AND user_id = 1
-- case: keyed delete by a condition on the counter
DELETE FROM members WHERE msgs > 5
-- case: keyed delete by the key
DELETE FROM members WHERE channel = 'b' AND user_id = 2
-- case: keyed upsert of one row
INSERT INTO members (channel, user_id, msgs) VALUES ('a', 1, 1) ON DUPLICATE KEY UPDATE msgs = msgs + 1
-- case: keyed upsert by VALUES()
INSERT INTO members (channel, user_id, msgs) VALUES ('b', 2, 3) ON DUPLICATE KEY UPDATE msgs = msgs + VALUES(msgs)
-- case: keyed upsert of several rows
INSERT INTO members (channel, user_id, msgs) VALUES ('a', 1, 1), ('b', 2, 1) ON DUPLICATE KEY UPDATE msgs = msgs + 1
-- case: keyed REPLACE
REPLACE INTO members (channel, user_id, msgs) VALUES ('a', 1, 5)
-- case: keyed insert of a new row
INSERT INTO members (channel, user_id, msgs) VALUES ('d', 4, 0)
-- case: keyed upsert of several rows by VALUES()
INSERT INTO members (channel, user_id, msgs) VALUES ('a', 1, 2), ('e', 5, 2) ON DUPLICATE KEY UPDATE msgs = msgs + VALUES(msgs)
-- case: a BIGINT touch column assigned GREATEST(v, itself) (Mattermost), and read back
UPDATE members SET msgs = msgs + 1, last_at = GREATEST(1718000000999, last_at) WHERE channel = 'a' AND user_id = 1
-- case: a BIGINT touch column assigned GREATEST(itself, ?) with placeholders
UPDATE members SET last_at = GREATEST(members.last_at, ?), msgs = msgs + ? WHERE channel = ? AND user_id = ?
-- case: a BIGINT touch column assigned a time
UPDATE members SET msgs = msgs + 1, last_at = 1718000000123 WHERE channel = 'b' AND user_id = 2
-- case: a BIGINT touch column read, its base value below what a slot holds
SELECT channel, last_at FROM members WHERE last_at > 0 OR last_at < 0 ORDER BY channel
-- case: GREATEST of another column is a guarded write
UPDATE members SET msgs = msgs + 1, last_at = GREATEST(1718000000999, msgs) WHERE channel = 'a' AND user_id = 1
