package executor

import "sync"

// existsCache remembers keys of ruled tables whose base row is known to
// exist (committed), so an increment needs no existence check. It is shared
// by all sessions and safe for concurrent use. It is bounded: when a table
// holds maxKeys keys, an arbitrary quarter of them is forgotten.
type existsCache struct {
	mu      sync.RWMutex
	tables  map[string]map[string]struct{}
	maxKeys int
}

func newExistsCache(maxKeys int) *existsCache {
	return &existsCache{tables: map[string]map[string]struct{}{}, maxKeys: maxKeys}
}

func (c *existsCache) has(table, key string) bool {
	c.mu.RLock()
	_, ok := c.tables[table][key]
	c.mu.RUnlock()
	return ok
}

func (c *existsCache) add(table, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.tables[table]
	if m == nil {
		m = map[string]struct{}{}
		c.tables[table] = m
	}
	if len(m) >= c.maxKeys {
		n := len(m) / 4
		for k := range m {
			if n == 0 {
				break
			}
			delete(m, k)
			n--
		}
	}
	m[key] = struct{}{}
}

// forget drops every key of table (a DELETE, REPLACE or TRUNCATE may have
// removed rows).
func (c *existsCache) forget(table string) {
	c.mu.Lock()
	delete(c.tables, table)
	c.mu.Unlock()
}

func (c *existsCache) size() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for _, m := range c.tables {
		n += len(m)
	}
	return n
}
