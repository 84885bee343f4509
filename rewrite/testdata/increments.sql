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
-- case: increment with another WHERE stays on the base column
UPDATE repos SET downloads = downloads + 1 WHERE name = 'x'
-- case: increment with IN stays on the base column
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
