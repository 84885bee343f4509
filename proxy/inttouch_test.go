package proxy_test

import "testing"

// TestIntegerTouch: issue 22's integer touch columns — a Unix time
// assigned with an increment (phpBB's topic_last_view_time) is slotted
// with it, the later time kept, as for DATETIME touch columns; times out
// of the column's range, and other values, run as written on the base row.
func TestIntegerTouch(t *testing.T) {
	const plain, ruled = "inttouch_plain", "inttouch_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE phpbb_topics (topic_id INT UNSIGNED NOT NULL AUTO_INCREMENT, topic_views INT UNSIGNED NOT NULL DEFAULT 0, " +
			"topic_last_view_time INT UNSIGNED NOT NULL DEFAULT 0, topic_posts_approved INT UNSIGNED NOT NULL DEFAULT 0, " +
			"topic_bumped TINYINT UNSIGNED NOT NULL DEFAULT 0, seen INT NULL, PRIMARY KEY (topic_id)) ENGINE=InnoDB",
		"INSERT INTO phpbb_topics (topic_id, topic_views, topic_last_view_time, seen) VALUES (1234, 10, 1717000000, NULL), (1235, 0, 0, -5)",
	}, "table: "+ruled+".phpbb_topics\nkey: topic_id\ncounters: [topic_views, topic_posts_approved]\ntouch: [topic_last_view_time, seen]\nslots: 4\n")
	corpus := []step{
		// Slotted: phpBB's per-view statement, text and prepared.
		text("UPDATE phpbb_topics SET topic_views = topic_views + 1, topic_last_view_time = 1718000000 WHERE topic_id = 1234"),
		prep("UPDATE phpbb_topics SET topic_views = topic_views + ?, topic_last_view_time = ? WHERE topic_id = ?", 1, 1718000005, 1234),
		text("SELECT * FROM phpbb_topics ORDER BY topic_id"),
		text("SELECT topic_id FROM phpbb_topics WHERE topic_last_view_time > 1718000001"),
		text("UPDATE phpbb_topics SET topic_views = topic_views + 1, topic_last_view_time = 1718000009, seen = -3 WHERE topic_id IN (1234, 1235)"),
		text("SELECT topic_id, topic_views, topic_last_view_time, seen FROM phpbb_topics ORDER BY topic_id"),
		// Not slotted, exact: out of range, a string, an expression, with
		// a non-counter column.
		text("UPDATE phpbb_topics SET topic_views = topic_views + 1, topic_last_view_time = -1 WHERE topic_id = 1234"),
		prep("UPDATE phpbb_topics SET topic_views = topic_views + ?, topic_last_view_time = ? WHERE topic_id = ?", 1, "1718000100", 1234),
		text("UPDATE phpbb_topics SET topic_views = topic_views + 1, topic_last_view_time = UNIX_TIMESTAMP('2024-06-10 00:00:00') WHERE topic_id = 1235"),
		text("UPDATE phpbb_topics SET topic_last_view_time = 1718000200, topic_bumped = 0, topic_posts_approved = topic_posts_approved + 1 WHERE topic_id = 1234"),
		text("SELECT * FROM phpbb_topics ORDER BY topic_id"),
		// In a transaction, rolled up, and after a roll-up.
		text("BEGIN"),
		text("UPDATE phpbb_topics SET topic_views = topic_views + 1, topic_last_view_time = 1718000300 WHERE topic_id = 1234"),
		text("SELECT topic_views, topic_last_view_time FROM phpbb_topics WHERE topic_id = 1234"),
		text("COMMIT"),
		text("UPDATE phpbb_topics SET topic_views = topic_views + 1, topic_last_view_time = 1718000400, seen = 7 WHERE topic_id = 1235"),
		text(touchRollup),
		text("SELECT * FROM phpbb_topics ORDER BY topic_id"),
		text("UPDATE phpbb_topics SET topic_views = topic_views + 1, topic_last_view_time = 1718000500 WHERE topic_id = 1235"),
		text("SELECT MAX(topic_last_view_time), SUM(topic_views) FROM phpbb_topics"),
	}
	st, _ := runDifferential(t, cat, plain, ruled, corpus)
	t.Logf("slotted %d, guarded %d", st.RewrittenWrites, st.GuardedWrites)
	if st.RewrittenWrites < 6 {
		t.Errorf("%d increments slotted, want at least 6", st.RewrittenWrites)
	}
}
