package proxy_test

import "testing"

// TestNullTestsAndClamps: issue 22's conditions and clamps that keep an
// increment slotted — a NULL test of the counter in its WHERE clause
// (MediaWiki's user_editcount: the total is NULL exactly when the base
// value is) and GREATEST(c + n, 0) with n > 0 on a counter that cannot be
// negative (MediaWiki's site_stats) — with the server as the oracle, and
// the shapes that stay on the base row (a clamp of a signed counter, a
// placeholder delta in the clamp) exact too.
func TestNullTestsAndClamps(t *testing.T) {
	const plain, ruled = "nullclamp_plain", "nullclamp_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE user (user_id INT UNSIGNED NOT NULL PRIMARY KEY, user_name VARCHAR(20) NOT NULL DEFAULT '', " +
			"user_editcount INT NULL, user_touched INT UNSIGNED NOT NULL DEFAULT 0, balance BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO user (user_id, user_name, user_editcount, user_touched, balance) VALUES (1, 'a', 5, 4294967290, -3), (2, 'b', NULL, 0, 0), (3, 'c', 0, 7, 2)",
	}, "table: "+ruled+".user\nkey: user_id\ncounters: [user_editcount, user_touched, balance]\nslots: 4\n")
	corpus := []step{
		// Slotted: a NULL test of the counter, as MediaWiki writes it.
		text("UPDATE user SET user_editcount=user_editcount+1 WHERE user_id = 1 AND (user_editcount IS NOT NULL)"),
		prep("UPDATE `user` SET user_editcount=user_editcount+1 WHERE user_id = ? AND (user_editcount IS NOT NULL)", 3),
		text("UPDATE user SET user_touched = user_touched + 1 WHERE user_id = 1 AND user_editcount IS NOT NULL AND user_name = 'a'"),
		// Slotted: a clamp at 0 of an unsigned counter, either order.
		text("UPDATE user SET user_touched = GREATEST(user_touched + 2, 0) WHERE user_id = 1"),
		text("UPDATE user SET user_touched = GREATEST(0, user_touched + 1) WHERE user_id IN (1, 3)"),
		text("SELECT * FROM user ORDER BY user_id"),
		// Beyond the column's range: the server's error, as directly.
		text("UPDATE user SET user_touched = GREATEST(user_touched + 5, 0) WHERE user_id = 1"),
		text("SELECT user_touched FROM user WHERE user_id = 1"),
		// The NULL record: matched or not, never changed, as directly.
		text("UPDATE user SET user_editcount=user_editcount+1 WHERE user_id = 2 AND (user_editcount IS NOT NULL)"),
		text("UPDATE user SET user_editcount=user_editcount+1 WHERE user_id = 2 AND user_editcount IS NULL"),
		text("UPDATE user SET user_editcount=user_editcount+1 WHERE user_id = 3 AND user_editcount IS NULL"),
		// On the base row, exactly: a clamp of a signed counter (it can
		// be below 0), a placeholder delta, a condition on the value.
		text("UPDATE user SET balance = GREATEST(balance + 1, 0) WHERE user_id = 1"),
		prep("UPDATE user SET user_touched = GREATEST(user_touched + ?, 0) WHERE user_id = ?", 1, 3),
		text("UPDATE user SET user_editcount = user_editcount + 1 WHERE user_id = 1 AND user_editcount > 5"),
		text("SELECT * FROM user ORDER BY user_id"),
		// Issue 22's other conditions and clamps, which only the total
		// can decide: a clamped decrement, a cap, a floor.
		text("UPDATE user SET user_touched = GREATEST(user_touched, 1) - 1 WHERE user_id = 3"),
		text("UPDATE user SET user_touched = GREATEST(user_touched, 1) - 1 WHERE user_id = 2"),
		text("UPDATE user SET balance = balance + 1 WHERE user_id = 3 AND balance < 100"),
		text("UPDATE user SET balance = balance + 200 WHERE user_id = 3"),
		text("UPDATE user SET balance = balance + 1 WHERE user_id = 3 AND balance < 100"),
		text("UPDATE user SET balance = balance - 1 WHERE user_id = 1 AND balance > 0"),
		text("SELECT * FROM user ORDER BY user_id"),
		// Quoted deltas (PHP quotes its parameters): slotted when the
		// string is exactly one integer; a zero one changes nothing.
		text("UPDATE user SET balance = balance + '101' WHERE user_id = 3"),
		text("UPDATE user SET balance = balance - '5', user_touched = user_touched + '-2' WHERE user_id = 3"),
		text("UPDATE user SET balance = balance + '0' WHERE user_id = 3"),
		text("UPDATE user SET balance = balance + '007' WHERE user_id = 3"),
		text("UPDATE user SET balance = balance + ' 1' WHERE user_id = 3"),
		text("SHOW WARNINGS"),
		text("SELECT balance, user_touched FROM user WHERE user_id = 3"),
		// Deltas that are expressions of integer literals: slotted; zero
		// changes nothing; beyond BIGINT, the server's error.
		text("UPDATE user SET balance = balance + (2 * 3) WHERE user_id = 3"),
		text("UPDATE user SET balance = balance - (4 - 4) WHERE user_id = 3"),
		text("UPDATE user SET user_touched = user_touched + 3 * -2 + 10 WHERE user_id = 3"),
		text("UPDATE user SET balance = balance + 4611686018427387904 * 4 WHERE user_id = 3"),
		text("SELECT balance, user_touched FROM user WHERE user_id = 3"),
		// In a transaction, then rolled up.
		text("BEGIN"),
		text("UPDATE user SET user_editcount=user_editcount+1 WHERE user_id = 3 AND (user_editcount IS NOT NULL)"),
		text("SELECT user_editcount FROM user WHERE user_id = 3"),
		text("COMMIT"),
		text(touchRollup),
		text("SELECT * FROM user ORDER BY user_id"),
	}
	st, _ := runDifferential(t, cat, plain, ruled, corpus)
	// The slotted statements above: three NULL tests, two clamps, the NULL
	// record's test that matches no row, and the one in the transaction
	// (a clamp past the range, the NULL-valued record's increments and the
	// base-row shapes are not).
	t.Logf("slotted %d, guarded %d", st.RewrittenWrites, st.GuardedWrites)
	if st.RewrittenWrites < 10 {
		t.Errorf("%d increments slotted, want at least 10 (stats %+v)", st.RewrittenWrites, st)
	}
}

// TestUniqueKeyIncrements: issue 22's records named by a UNIQUE key other
// than the primary key (Django's .filter(token=…).update(view_cnt=F(…)+1),
// phpBB's word_text IN (…)): slotted, the records being the rows the key
// finds; a transaction that reads after such an increment folds every
// slotted record of the table first (its keys are not known).
func TestUniqueKeyIncrements(t *testing.T) {
	const plain, ruled = "ukinc_plain", "ukinc_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE links (id INT NOT NULL AUTO_INCREMENT, token VARCHAR(100) NOT NULL, site INT NOT NULL DEFAULT 0, path VARCHAR(20) NOT NULL DEFAULT '', " +
			"view_cnt INT NOT NULL DEFAULT 0, PRIMARY KEY (id), UNIQUE KEY token (token), UNIQUE KEY site_path (site, path))",
		"INSERT INTO links (id, token, site, path, view_cnt) VALUES (1, 'f3a9', 1, '/a', 5), (2, 'b7c1', 1, '/b', 0), (3, 'c0de', 2, '/a', 9)",
	}, "table: "+ruled+".links\nkey: id\ncounters: [view_cnt]\nslots: 4\n")
	corpus := []step{
		text("UPDATE `links` SET `view_cnt` = (`links`.`view_cnt` + 1) WHERE `links`.`token` = 'f3a9'"),
		prep("UPDATE links SET view_cnt = view_cnt + ? WHERE token = ?", 2, "b7c1"),
		text("UPDATE links SET view_cnt = view_cnt + 1 WHERE token IN ('f3a9', 'c0de', 'none')"),
		text("UPDATE links SET view_cnt = view_cnt + 1 WHERE token = 'F3A9'"), // the column's collation
		text("UPDATE links SET view_cnt = view_cnt + 3 WHERE site = 1 AND path = '/b'"),
		text("UPDATE links SET view_cnt = view_cnt + 1 WHERE token = 'none'"),
		text("SELECT id, token, view_cnt FROM links ORDER BY id"),
		// Not by a whole unique key, or with a LIMIT: on the base row.
		text("UPDATE links SET view_cnt = view_cnt + 1 WHERE site = 1"),
		text("UPDATE links SET view_cnt = view_cnt + 1 WHERE token IN ('f3a9', 'c0de') LIMIT 1"),
		// Increment, then read, in a transaction.
		text("BEGIN"),
		text("SELECT view_cnt FROM links WHERE id = 3"),
		on(1, text("UPDATE links SET view_cnt = view_cnt + 10 WHERE token = 'c0de'")),
		text("UPDATE links SET view_cnt = view_cnt + 1 WHERE token = 'c0de'"),
		text("SELECT view_cnt FROM links WHERE token = 'c0de'"),
		text("COMMIT"),
		text(touchRollup),
		text("SELECT * FROM links ORDER BY id"),
	}
	st, _ := runDifferential(t, cat, plain, ruled, corpus)
	t.Logf("slotted %d, guarded %d", st.RewrittenWrites, st.GuardedWrites)
	if st.RewrittenWrites < 7 {
		t.Errorf("%d increments slotted, want at least 7", st.RewrittenWrites)
	}
}

// TestImpliedBounds: issue 22's conditions on the counter — a decrement
// that stops at 0 (`c = c - 1 WHERE id = ? AND c > 0`) on a counter that
// cannot be negative (UNSIGNED, or a CHECK keeping it ≥ 0) and an increment
// bounded at the column's maximum — slotted, because every slotted
// increment keeps the total within the column's range and so makes the
// bound hold; where the total is at the bound the statement runs on the
// base row and matches nothing, as directly. The base value alone would
// decide wrongly: the records start with their base at 0 and their total
// in the slots. Bounds the range does not imply, on signed counters, with
// placeholders, and shapes that differ only in the bound's value (one
// statement shape, planned from its own values every time) stay exact.
func TestImpliedBounds(t *testing.T) {
	const plain, ruled = "bounds_plain", "bounds_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE forums (forum_id INT UNSIGNED NOT NULL PRIMARY KEY, forum_topics INT UNSIGNED NOT NULL DEFAULT 0, " +
			"forum_posts MEDIUMINT UNSIGNED NOT NULL DEFAULT 0, score INT NOT NULL DEFAULT 0, stock INT NOT NULL DEFAULT 0, CHECK (stock >= 0))",
		"INSERT INTO forums (forum_id) VALUES (1), (2), (3)",
	}, "table: "+ruled+".forums\nkey: forum_id\ncounters: [forum_topics, forum_posts, score, stock]\nslots: 4\n")
	corpus := []step{
		// The totals live in the slots; the base values stay 0.
		text("UPDATE forums SET forum_topics = forum_topics + 3, stock = stock + 2, score = score + 1 WHERE forum_id IN (1, 2)"),
		text("UPDATE forums SET forum_posts = forum_posts + 16777200 WHERE forum_id = 1"),
		text("SELECT * FROM forums ORDER BY forum_id"),
		// Decrements that stop at 0, as phpBB and WordPress write them.
		text("UPDATE forums SET forum_topics = forum_topics - 1 WHERE forum_id = 1 AND forum_topics > 0"),
		text("UPDATE forums SET forum_topics = forum_topics - 1 WHERE forum_id = 1 AND forum_topics > 0"),
		text("UPDATE forums SET forum_topics = forum_topics - 1 WHERE forum_id = 1 AND forum_topics > 0"),
		text("UPDATE forums SET forum_topics = forum_topics - 1 WHERE forum_id = 1 AND forum_topics > 0"),
		text("SELECT forum_topics FROM forums WHERE forum_id = 1"),
		text("UPDATE forums SET forum_topics = forum_topics - 2 WHERE forum_id = 2 AND 2 <= `forums`.`forum_topics` AND forum_id > 0"),
		text("UPDATE forums SET forum_topics = forum_topics - 2 WHERE forum_id = 2 AND forum_topics >= 2"),
		text("UPDATE forums SET stock = stock - 1 WHERE forum_id IN (1, 2, 3) AND stock > 0"),
		text("UPDATE forums SET stock = stock - 1 WHERE forum_id IN (1, 2, 3) AND stock > 0"),
		text("UPDATE forums SET stock = stock - 1 WHERE forum_id IN (1, 2, 3) AND stock > 0"),
		text("SELECT * FROM forums ORDER BY forum_id"),
		// An increment bounded at the column's maximum (MEDIUMINT
		// UNSIGNED: 16777215).
		text("UPDATE forums SET forum_posts = forum_posts + 10 WHERE forum_id = 1 AND forum_posts < 16777215"),
		text("UPDATE forums SET forum_posts = forum_posts + 10 WHERE forum_id = 1 AND forum_posts < 16777215"),
		text("SELECT forum_posts FROM forums WHERE forum_id = 1"),
		// Not implied by the range: on the base row, decided on the total.
		text("UPDATE forums SET forum_topics = forum_topics + 5 WHERE forum_id = 3"),
		text("UPDATE forums SET forum_topics = forum_topics - 1 WHERE forum_id = 3 AND forum_topics > 3"),
		text("UPDATE forums SET forum_topics = forum_topics - 1 WHERE forum_id = 3 AND forum_topics > 0"),
		text("UPDATE forums SET forum_topics = forum_topics - 1 WHERE forum_id = 3 AND forum_topics > 3"),
		text("UPDATE forums SET score = score - 1 WHERE forum_id = 1 AND score > 0"),
		text("UPDATE forums SET score = score - 1 WHERE forum_id = 1 AND score > 0"),
		prep("UPDATE forums SET forum_topics = forum_topics - ? WHERE forum_id = ? AND forum_topics > 0", 1, 3),
		prep("UPDATE forums SET forum_topics = forum_topics - 1 WHERE forum_id = ? AND forum_topics > 0", 3),
		text("SELECT * FROM forums ORDER BY forum_id"),
		// In a transaction, rolled back, then committed.
		text("BEGIN"),
		text("UPDATE forums SET forum_topics = forum_topics - 1 WHERE forum_id = 3 AND forum_topics > 0"),
		text("SELECT forum_topics FROM forums WHERE forum_id = 3"),
		text("ROLLBACK"),
		text("BEGIN"),
		text("UPDATE forums SET forum_topics = forum_topics - 1 WHERE forum_id = 3 AND forum_topics > 0"),
		text("UPDATE forums SET forum_topics = forum_topics - 1 WHERE forum_id = 3 AND forum_topics > 0"),
		text("COMMIT"),
		text(touchRollup),
		text("SELECT * FROM forums ORDER BY forum_id"),
		text("UPDATE forums SET forum_topics = forum_topics - 1 WHERE forum_id = 3 AND forum_topics > 0"),
		text("SELECT * FROM forums ORDER BY forum_id"),
	}
	st, _ := runDifferential(t, cat, plain, ruled, corpus)
	t.Logf("slotted %d, guarded %d", st.RewrittenWrites, st.GuardedWrites)
	if st.RewrittenWrites < 12 {
		t.Errorf("%d increments slotted, want at least 12 (stats %+v)", st.RewrittenWrites, st)
	}
}
