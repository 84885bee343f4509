package proxy_test

import (
	"testing"
)

// Writes of a ruled table that the proxy plans exactly instead of passing
// through (issue: no silent wrong totals): key changes, upserts and
// REPLACE that conflict on a secondary UNIQUE key, multi-table writes of
// two ruled tables. Each runs after increments left slots, and the totals
// must be the direct ones, with the real catalog (unique keys included).

const (
	writesPlain = "writes_plain"
	writesRuled = "writes_ruled"
)

var writesDDL = []string{
	"CREATE TABLE items (id BIGINT NOT NULL PRIMARY KEY, sku VARCHAR(20) NOT NULL, shop INT NOT NULL DEFAULT 1, " +
		"stock INT NOT NULL DEFAULT 0, sold INT NOT NULL DEFAULT 0, UNIQUE KEY by_sku (sku), UNIQUE KEY by_shop (shop, id)) ENGINE=InnoDB",
	"CREATE TABLE notes (id BIGINT NOT NULL PRIMARY KEY, item_id BIGINT NOT NULL, hits INT NOT NULL DEFAULT 0) ENGINE=InnoDB",
	"INSERT INTO items (id, sku, stock, sold) VALUES (1, 'a', 10, 1), (2, 'b', 20, 2), (3, 'c', 30, 3)",
	"INSERT INTO notes VALUES (1, 1, 5), (2, 2, 6), (3, 3, 7)",
}

const writesRules = "table: " + writesRuled + ".items\nkey: id\ncounters: [stock, sold]\n"

var writesCorpus = []step{
	text("UPDATE items SET sold = sold + 5, stock = stock - 5 WHERE id = 1"),
	text("UPDATE items SET sold = sold + 1 WHERE id IN (2, 3)"),
	// A key change: the record's slots move with it, none stay behind.
	text("UPDATE items SET id = 10 WHERE id = 1"),
	text("SELECT id, stock, sold FROM items ORDER BY id"),
	text("UPDATE items SET sold = sold + 1 WHERE id = 1"),
	text("UPDATE items SET sold = sold + 1 WHERE id = 10"),
	text("INSERT INTO items (id, sku) VALUES (1, 'a2')"),
	text("SELECT id, stock, sold FROM items ORDER BY id"),
	// An upsert that conflicts on the secondary key sku: the row found by
	// sku is reset, its slots with it.
	text("UPDATE items SET sold = sold + 7 WHERE id = 2"),
	text("INSERT INTO items (id, sku) VALUES (99, 'b') ON DUPLICATE KEY UPDATE sold = 0"),
	text("SELECT id, sku, stock, sold FROM items ORDER BY id"),
	prep("UPDATE items SET sold = sold + ? WHERE id = ?", 4, 3),
	prep("INSERT INTO items (id, sku) VALUES (?, ?) ON DUPLICATE KEY UPDATE sold = sold * 2, stock = 1", 98, "c"),
	text("SELECT id, sku, stock, sold FROM items ORDER BY id"),
	// REPLACE by the secondary key: the old row (and its slots) goes.
	text("UPDATE items SET sold = sold + 3 WHERE id = 10"),
	text("REPLACE INTO items (id, sku, stock) VALUES (77, 'a', 1)"),
	text("SELECT id, sku, stock, sold FROM items ORDER BY id"),
	text("UPDATE items SET sold = sold + 1 WHERE id IN (10, 77)"),
	text("SELECT id, sku, stock, sold FROM items ORDER BY id"),
	// A unique key the statement leaves to its default: every record is
	// folded first.
	text("UPDATE items SET stock = stock + 2 WHERE id = 2"),
	text("INSERT INTO items (id, sku) VALUES (2, 'zz') ON DUPLICATE KEY UPDATE stock = stock * 3"),
	text("SELECT id, sku, stock, sold FROM items ORDER BY id"),
	// The key changed by an upsert.
	text("UPDATE items SET sold = sold + 2 WHERE id = 3"),
	text("INSERT INTO items (id, sku) VALUES (3, 'x') ON DUPLICATE KEY UPDATE id = 30"),
	text("UPDATE items SET sold = sold + 2 WHERE id IN (3, 30)"),
	text("SELECT id, sku, stock, sold FROM items ORDER BY id"),
	// A multi-table UPDATE and DELETE.
	text("UPDATE items SET sold = sold + 1 WHERE id = 2"),
	text("UPDATE items i JOIN notes n ON n.item_id = i.id SET i.stock = n.hits, n.hits = i.sold WHERE n.id = 2"),
	text("SELECT id, stock, sold FROM items ORDER BY id"),
	text("SELECT * FROM notes ORDER BY id"),
	text(touchRollup),
	text("SELECT id, stock, sold FROM items ORDER BY id"),
}

func TestWritesDifferential(t *testing.T) {
	cat := loadedSetup(t, writesPlain, writesRuled, writesDDL, writesRules)
	if uk := cat.Tables()[0].UniqueKeys; len(uk) != 2 || len(uk[0]) != 2 || uk[0][0] != "shop" || len(uk[1]) != 1 || uk[1][0] != "sku" {
		t.Fatalf("unique keys %q, want [[shop id] [sku]]", uk)
	}
	stats, folded := runDifferential(t, cat, writesPlain, writesRuled, writesCorpus)
	t.Logf("%d statements; %d records folded by roll-up; proxy stats: %+v", len(writesCorpus), folded, stats)
	if stats.RewrittenWrites == 0 || stats.GuardedWrites < 6 {
		t.Fatalf("the corpus did not take the slotted and guarded paths: %+v", stats)
	}
}
