package proxy_test

import "testing"

// TestDecimalCounters: issue 22's counters in DECIMAL columns (Magento's
// stock quantity, DECIMAL(12,4), decremented per order line): slotted in
// units of the column's last digit, reads of the column's own type and
// value, NULL staying NULL, the range's ends and a delta finer than the
// column (which the column rounds) on the base row, as directly, strict and
// not, text and prepared, in transactions and after a roll-up.
func TestDecimalCounters(t *testing.T) {
	const plain, ruled = "decimal_plain", "decimal_ruled"
	cat := loadedSetup(t, plain, ruled, []string{
		"CREATE TABLE cataloginventory_stock_item (item_id INT UNSIGNED NOT NULL AUTO_INCREMENT, product_id INT UNSIGNED NOT NULL DEFAULT 0, " +
			"qty DECIMAL(12,4) DEFAULT NULL, price DECIMAL(10,2) NOT NULL DEFAULT 0, whole DECIMAL(5,0) UNSIGNED NOT NULL DEFAULT 0, " +
			"udec DECIMAL(8,2) UNSIGNED NOT NULL DEFAULT 0, " +
			"PRIMARY KEY (item_id)) ENGINE=InnoDB",
		"INSERT INTO cataloginventory_stock_item (item_id, product_id, qty, price, whole) VALUES (1, 10, 100.0000, 5.00, 3), (2, 11, NULL, 0, 0), (3, 12, 99999999.9000, 0, 99990)",
	}, "table: "+ruled+".cataloginventory_stock_item\nkey: item_id\ncounters: [qty, price, whole, udec]\nslots: 4\n")
	corpus := []step{
		// Slotted: whole units, fractions, both counters at once.
		text("UPDATE cataloginventory_stock_item SET qty = qty - 1 WHERE item_id = 1"),
		text("UPDATE cataloginventory_stock_item SET qty = qty - 0.5 WHERE item_id = 1"),
		text("UPDATE cataloginventory_stock_item SET qty = qty + 1.25, price = price - 10 WHERE item_id = 1"),
		text("UPDATE cataloginventory_stock_item SET price = price + 0.01, whole = whole + 2 WHERE item_id IN (1, 3)"),
		text("SELECT * FROM cataloginventory_stock_item ORDER BY item_id"),
		text("SELECT item_id, qty * 2, qty > 50, price FROM cataloginventory_stock_item WHERE qty IS NOT NULL ORDER BY qty"),
		text("SELECT SUM(qty), MIN(price), AVG(whole) FROM cataloginventory_stock_item"),
		prep("UPDATE cataloginventory_stock_item SET qty = qty - ? WHERE item_id = ?", 2, 1),
		prep("SELECT qty, price FROM cataloginventory_stock_item WHERE item_id = ?", 1),
		// Zero deltas change no row.
		text("UPDATE cataloginventory_stock_item SET qty = qty + 0.0 WHERE item_id = 1"),
		text("UPDATE cataloginventory_stock_item SET qty = qty - 0.0000, price = price + 0 WHERE item_id = 1"),
		// NULL stays NULL.
		text("UPDATE cataloginventory_stock_item SET qty = qty - 1 WHERE item_id = 2"),
		text("SELECT qty FROM cataloginventory_stock_item WHERE item_id = 2"),
		// Finer than the column: rounded on the base row, with its note.
		text("UPDATE cataloginventory_stock_item SET qty = qty - 0.00005 WHERE item_id = 1"),
		text("SHOW WARNINGS"),
		text("UPDATE cataloginventory_stock_item SET whole = whole + 0.5 WHERE item_id = 1"),
		text("SHOW WARNINGS"),
		text("UPDATE cataloginventory_stock_item SET qty = qty + '1.5' WHERE item_id = 1"),
		prep("UPDATE cataloginventory_stock_item SET qty = qty - ? WHERE item_id = ?", "1.5", 1),
		prep("UPDATE cataloginventory_stock_item SET qty = qty - ? WHERE item_id = ?", 0.25, 1),
		text("SELECT * FROM cataloginventory_stock_item ORDER BY item_id"),
		// The range's ends: DECIMAL(12,4) tops at 99999999.9999, the
		// UNSIGNED DECIMAL(5,0) at 99999 and 0.
		text("UPDATE cataloginventory_stock_item SET qty = qty + 0.0999 WHERE item_id = 3"),
		text("UPDATE cataloginventory_stock_item SET qty = qty + 0.0001 WHERE item_id = 3"),
		text("UPDATE cataloginventory_stock_item SET whole = whole + 9 WHERE item_id = 3"),
		text("UPDATE cataloginventory_stock_item SET whole = whole - 6 WHERE item_id = 1"),
		text("SELECT * FROM cataloginventory_stock_item ORDER BY item_id"),
		text("SET SESSION sql_mode = ''"),
		text("UPDATE cataloginventory_stock_item SET qty = qty + 1 WHERE item_id = 3"),
		text("SHOW WARNINGS"),
		text("UPDATE cataloginventory_stock_item SET whole = whole - 100 WHERE item_id = 1"),
		text("SHOW WARNINGS"),
		text("SET SESSION sql_mode = DEFAULT"),
		text("SELECT * FROM cataloginventory_stock_item ORDER BY item_id"),
		// A condition on the counter: on the base row.
		text("UPDATE cataloginventory_stock_item SET qty = qty - 1 WHERE item_id = 1 AND qty > 0"),
		// A write that folds in a REPEATABLE READ transaction that has
		// read (its rows made the transaction's own by two flips of the
		// counters, an UNSIGNED DECIMAL among them).
		text("UPDATE cataloginventory_stock_item SET udec = udec + 1.25, qty = qty + 1 WHERE item_id = 1"),
		text("BEGIN"),
		text("SELECT udec, qty FROM cataloginventory_stock_item WHERE item_id = 1"),
		text("UPDATE cataloginventory_stock_item SET udec = udec + 2.5 WHERE item_id = 1"),
		text("UPDATE cataloginventory_stock_item SET udec = 7.75, product_id = product_id + 1 WHERE product_id > 0"),
		text("SELECT * FROM cataloginventory_stock_item ORDER BY item_id"),
		text("COMMIT"),
		// Transactions, a roll-up, a DELETE that reads the counter.
		text("BEGIN"),
		text("UPDATE cataloginventory_stock_item SET qty = qty - 3.5 WHERE item_id = 1"),
		text("SELECT qty FROM cataloginventory_stock_item WHERE item_id = 1"),
		text("ROLLBACK"),
		text("BEGIN"),
		text("UPDATE cataloginventory_stock_item SET qty = qty - 3.5 WHERE item_id = 1"),
		text("UPDATE cataloginventory_stock_item SET qty = qty + 0.0001 WHERE item_id = 1"),
		text("COMMIT"),
		text("SELECT * FROM cataloginventory_stock_item ORDER BY item_id"),
		text(touchRollup),
		text("SELECT * FROM cataloginventory_stock_item ORDER BY item_id"),
		text("UPDATE cataloginventory_stock_item SET qty = qty - 1.0001 WHERE item_id = 1"),
		text("DELETE FROM cataloginventory_stock_item WHERE qty < 95"),
		text("SELECT * FROM cataloginventory_stock_item ORDER BY item_id"),
		text("UPDATE cataloginventory_stock_item SET price = price + 0.07 WHERE item_id = 3"),
		text("SELECT price FROM cataloginventory_stock_item WHERE item_id = 3"),
	}
	st, _ := runDifferential(t, cat, plain, ruled, corpus)
	// The last increment is in a slot, in cents.
	r, err := touchAdmin(t).Execute("SELECT GROUP_CONCAT(`count`) FROM " + ruled + ".slotted_counters WHERE `count` <> 0")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := r.GetString(0, 0); got != "7" {
		t.Errorf("slot rows with counts: %q, want the 7 cents of the last increment", got)
	}
	t.Logf("slotted %d, guarded %d", st.RewrittenWrites, st.GuardedWrites)
	if st.RewrittenWrites < 10 {
		t.Errorf("%d increments slotted, want at least 10", st.RewrittenWrites)
	}
}
