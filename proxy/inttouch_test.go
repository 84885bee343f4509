package proxy_test

import (
	"fmt"
	"testing"
)

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

// TestBigintTouchGreatest: issue 22's BIGINT touch columns, and a touch
// column assigned GREATEST(v, itself) — Mattermost's per-post statement,
// millisecond times in nullable BIGINT columns — slotted with the
// increments, the later time kept. GREATEST is NULL while the column is,
// so a record whose column is NULL runs on the base row; times a slot
// cannot hold (negative, near the top of the type), strings and other
// expressions run as written.
func TestBigintTouchGreatest(t *testing.T) {
	const plain, ruled = "bigtouch_plain", "bigtouch_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE Channels (Id VARCHAR(26) NOT NULL, LastPostAt BIGINT, TotalMsgCount BIGINT, LastRootPostAt BIGINT DEFAULT 0, " +
			"TotalMsgCountRoot BIGINT, SeenAt BIGINT UNSIGNED NOT NULL DEFAULT 0, PRIMARY KEY (Id)) ENGINE=InnoDB",
		"INSERT INTO Channels (Id, LastPostAt, TotalMsgCount, TotalMsgCountRoot) VALUES ('kq8w9y3ujtbpmyq1r6f9x3ab7e', NULL, 10, 2), ('zz', 1700000000000, 0, 0)",
		"CREATE TABLE ChannelMembers (ChannelId VARCHAR(26) NOT NULL, UserId VARCHAR(26) NOT NULL, MsgCount BIGINT, MentionCount BIGINT, " +
			"MentionCountRoot BIGINT, LastUpdateAt BIGINT, PRIMARY KEY (ChannelId, UserId)) ENGINE=InnoDB",
		"INSERT INTO ChannelMembers VALUES ('kq8w9y3ujtbpmyq1r6f9x3ab7e', 'u1', 0, 0, 0, 0), ('zz', 'u1', 0, 0, 0, NULL)",
	}, "table: "+ruled+".Channels\nkey: Id\ncounters: [TotalMsgCount, TotalMsgCountRoot]\ntouch: [LastPostAt, LastRootPostAt, SeenAt]\nslots: 4\n"+
		"---\ntable: "+ruled+".ChannelMembers\nkey: [ChannelId, UserId]\ncounters: [MsgCount, MentionCount, MentionCountRoot]\ntouch: [LastUpdateAt]\nslots: 4\n")
	const post = "UPDATE Channels SET LastPostAt = GREATEST(%s, LastPostAt), LastRootPostAt = GREATEST(%s, LastRootPostAt), " +
		"TotalMsgCount = TotalMsgCount + 3, TotalMsgCountRoot = TotalMsgCountRoot + 1 WHERE Id = '%s'"
	f := func(a, b, id string) string { return fmt.Sprintf(post, a, b, id) }
	corpus := []step{
		// Slotted: the record whose LastPostAt is set; then an older
		// time, which the later one outlives.
		text(f("1718000000123", "1718000000123", "zz")),
		text(f("1600000000000", "1600000000000", "zz")),
		text("SELECT * FROM Channels ORDER BY Id"),
		// LastPostAt NULL: GREATEST keeps it NULL (on the base row);
		// LastRootPostAt (0) takes the time.
		text(f("1718000000200", "1718000000200", "kq8w9y3ujtbpmyq1r6f9x3ab7e")),
		text("SELECT * FROM Channels ORDER BY Id"),
		// Prepared, as Mattermost sends it, and the arguments reversed.
		prep("UPDATE Channels SET LastPostAt = GREATEST(?, LastPostAt), LastRootPostAt = GREATEST(?, LastRootPostAt), "+
			"TotalMsgCount = TotalMsgCount + ?, TotalMsgCountRoot = TotalMsgCountRoot + ? WHERE Id = ?", 1718000000300, 1718000000300, 2, 1, "zz"),
		text("UPDATE Channels SET LastPostAt = GREATEST(Channels.LastPostAt, 1718000000400), TotalMsgCount = TotalMsgCount + 1 WHERE Id = 'zz'"),
		text("SELECT LastPostAt, LastRootPostAt, TotalMsgCount FROM Channels WHERE Id = 'zz'"),
		// A plain BIGINT time, and BIGINT UNSIGNED.
		text("UPDATE ChannelMembers SET MentionCount = MentionCount + 1, MentionCountRoot = MentionCountRoot + 1, LastUpdateAt = 1718000000123 " +
			"WHERE UserId = 'u1' AND ChannelId = 'kq8w9y3ujtbpmyq1r6f9x3ab7e'"),
		text("UPDATE ChannelMembers SET MsgCount = MsgCount + 1, LastUpdateAt = 1718000000500 WHERE ChannelId = 'zz' AND UserId = 'u1'"),
		text("UPDATE Channels SET TotalMsgCount = TotalMsgCount + 1, SeenAt = 1718000000999 WHERE Id = 'zz'"),
		text("SELECT * FROM ChannelMembers ORDER BY ChannelId"),
		// Not slotted, exact: times a slot cannot hold, a string, another
		// column, three arguments.
		text(f("-5", "-5", "zz")),
		text("UPDATE Channels SET TotalMsgCount = TotalMsgCount + 1, SeenAt = 18446744073709551615 WHERE Id = 'zz'"),
		text("SELECT * FROM Channels ORDER BY Id"),
		text("UPDATE Channels SET TotalMsgCount = TotalMsgCount + 1, SeenAt = 9223372036854775807 WHERE Id = 'kq8w9y3ujtbpmyq1r6f9x3ab7e'"),
		text(f("9223372036854775807", "9223372036854775806", "zz")),
		text("SELECT * FROM Channels ORDER BY Id"),
		text(f("'1718000000600'", "1718000000600", "zz")),
		text("UPDATE Channels SET LastPostAt = GREATEST(1718000000700, LastRootPostAt), TotalMsgCount = TotalMsgCount + 1 WHERE Id = 'kq8w9y3ujtbpmyq1r6f9x3ab7e'"),
		text("UPDATE Channels SET LastRootPostAt = GREATEST(1718000000800, LastRootPostAt, 5), TotalMsgCount = TotalMsgCount + 1 WHERE Id = 'kq8w9y3ujtbpmyq1r6f9x3ab7e'"),
		text("SELECT * FROM Channels ORDER BY Id"),
		// Several records in a transaction, one NULL.
		text("BEGIN"),
		text("UPDATE Channels SET LastPostAt = GREATEST(1718000000950, LastPostAt), TotalMsgCount = TotalMsgCount + 1 WHERE Id IN ('zz', 'kq8w9y3ujtbpmyq1r6f9x3ab7e')"),
		text("SELECT Id, LastPostAt, TotalMsgCount FROM Channels ORDER BY Id"),
		text("COMMIT"),
		// In a transaction, rolled back and committed; then a roll-up.
		text("BEGIN"),
		text(f("1718000000900", "1718000000900", "kq8w9y3ujtbpmyq1r6f9x3ab7e")),
		text("SELECT LastPostAt, LastRootPostAt, TotalMsgCount FROM Channels WHERE Id = 'kq8w9y3ujtbpmyq1r6f9x3ab7e'"),
		text("ROLLBACK"),
		text("BEGIN"),
		text(f("1718000001000", "1718000001000", "kq8w9y3ujtbpmyq1r6f9x3ab7e")),
		text("COMMIT"),
		text(touchRollup),
		text("SELECT * FROM Channels ORDER BY Id"),
		text(f("1718000001100", "1718000001100", "kq8w9y3ujtbpmyq1r6f9x3ab7e")),
		text("SELECT * FROM Channels ORDER BY Id"),
		text("SELECT * FROM ChannelMembers ORDER BY ChannelId"),
	}
	st, _ := runDifferential(t, cat, plain, ruled, corpus)
	t.Logf("slotted %d, guarded %d", st.RewrittenWrites, st.GuardedWrites)
	if st.RewrittenWrites < 8 {
		t.Errorf("%d increments slotted, want at least 8", st.RewrittenWrites)
	}
}

// TestUnchangedAssignments: issue 22's other columns assigned with an
// increment — phpBB's reply sets topic_bumped = 0 and topic_bumper = 0
// with topic_posts_approved + 1 — slotted while those columns already hold
// the values (the assignment changes nothing), else run on the base row;
// values out of range, NULL into NOT NULL, strings, placeholders and
// generated columns as directly, strict and not.
func TestUnchangedAssignments(t *testing.T) {
	const plain, ruled = "unchanged_plain", "unchanged_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE phpbb_topics (topic_id INT UNSIGNED NOT NULL AUTO_INCREMENT, topic_posts_approved INT UNSIGNED NOT NULL DEFAULT 0, " +
			"topic_last_view_time INT UNSIGNED NOT NULL DEFAULT 0, topic_bumped TINYINT UNSIGNED NOT NULL DEFAULT 0, " +
			"topic_bumper INT UNSIGNED NOT NULL DEFAULT 0, note INT NULL, label VARCHAR(10) NOT NULL DEFAULT '', " +
			"twice INT AS (topic_bumper * 2), PRIMARY KEY (topic_id)) ENGINE=InnoDB",
		"INSERT INTO phpbb_topics (topic_id, topic_bumped, topic_bumper, note) VALUES (1234, 0, 0, NULL), (1235, 1, 7, 5)",
	}, "table: "+ruled+".phpbb_topics\nkey: topic_id\ncounters: [topic_posts_approved]\ntouch: [topic_last_view_time]\nslots: 4\n")
	const reply = "UPDATE phpbb_topics SET topic_last_view_time = 1718000000, topic_bumped = 0, topic_bumper = 0, " +
		"topic_posts_approved = topic_posts_approved + 1 WHERE topic_id = %d"
	corpus := []step{
		// Slotted: the columns hold 0 already.
		text(fmt.Sprintf(reply, 1234)),
		text(fmt.Sprintf(reply, 1234)),
		prep("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + ?, topic_bumped = 0, note = NULL WHERE topic_id = ?", 2, 1234),
		text("SELECT * FROM phpbb_topics ORDER BY topic_id"),
		// On the base row: 1235 holds 1 and 7; then slotted, it holds 0.
		text(fmt.Sprintf(reply, 1235)),
		text(fmt.Sprintf(reply, 1235)),
		text("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + 1, note = -3 WHERE topic_id = 1235"),
		text("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + 1, note = -3 WHERE topic_id = 1235"),
		text("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + 0, topic_bumped = 0 WHERE topic_id = 1235"),
		text("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + 0, topic_bumped = 1 WHERE topic_id = 1235"),
		text("SELECT * FROM phpbb_topics ORDER BY topic_id"),
		// Out of range, NULL into NOT NULL, assigned twice: strict, then
		// not.
		text("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + 1, topic_bumped = 300 WHERE topic_id = 1234"),
		text("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + 1, topic_bumped = NULL WHERE topic_id = 1234"),
		text("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + 1, topic_bumped = -1 WHERE topic_id = 1234"),
		text("SET SESSION sql_mode = ''"),
		text("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + 1, topic_bumped = 300 WHERE topic_id = 1234"),
		text("SHOW WARNINGS"),
		text("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + 1, topic_bumped = 255 WHERE topic_id = 1234"),
		text("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + 1, topic_bumped = NULL WHERE topic_id = 1234"),
		text("SHOW WARNINGS"),
		text("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + 1, topic_bumped = 0, topic_bumped = 1 WHERE topic_id = 1234"),
		text("SELECT * FROM phpbb_topics ORDER BY topic_id"),
		// Not slotted: a string, a placeholder, a generated column.
		text("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + 1, label = '' WHERE topic_id = 1234"),
		prep("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + 1, topic_bumped = ? WHERE topic_id = ?", 1, 1234),
		text("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + 1, twice = 0 WHERE topic_id = 1234"),
		// Only other columns: as written.
		text("UPDATE phpbb_topics SET topic_bumped = 0 WHERE topic_id = 1234"),
		// Several records in a transaction, one whose column does not
		// hold the value yet: on the base rows from the start.
		text("UPDATE phpbb_topics SET topic_bumped = 1 WHERE topic_id = 1235"),
		text("BEGIN"),
		text("UPDATE phpbb_topics SET topic_posts_approved = topic_posts_approved + 1, topic_bumped = 0 WHERE topic_id IN (1234, 1235)"),
		text("SELECT topic_id, topic_posts_approved, topic_bumped FROM phpbb_topics ORDER BY topic_id"),
		text("COMMIT"),
		// In a transaction, rolled back; a roll-up.
		text("BEGIN"),
		text(fmt.Sprintf(reply, 1234)),
		text("SELECT topic_posts_approved, topic_bumped FROM phpbb_topics WHERE topic_id = 1234"),
		text("ROLLBACK"),
		text(touchRollup),
		text(fmt.Sprintf(reply, 1234)),
		text("SELECT * FROM phpbb_topics ORDER BY topic_id"),
	}
	st, _ := runDifferential(t, cat, plain, ruled, corpus)
	t.Logf("slotted %d, guarded %d", st.RewrittenWrites, st.GuardedWrites)
	if st.RewrittenWrites < 8 {
		t.Errorf("%d increments slotted, want at least 8", st.RewrittenWrites)
	}
}
