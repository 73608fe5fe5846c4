package filter

import "sync"

// DefaultCacheSize is how many distinct filters a Cache holds by default.
const DefaultCacheSize = 10000

// Cache holds parsed filters by their stored text, so that the fanout
// parses a filter once, when it first meets it (or meets a new version of
// it), and not per event. Keyed by the text itself, an edited filter is a
// new entry and endpoints with the same filter share one. It is safe for
// concurrent use.
type Cache struct {
	size int

	mu sync.RWMutex
	m  map[string]cached
}

type cached struct {
	f   *Filter
	err error
}

// NewCache returns a Cache of at most size filters (0: DefaultCacheSize).
// When it is full it starts afresh: entries of deleted or edited filters go
// with it, and the filters in use are parsed again as they are met.
func NewCache(size int) *Cache {
	if size <= 0 {
		size = DefaultCacheSize
	}
	return &Cache{size: size, m: make(map[string]cached)}
}

// Get returns the filter stored as text (Parse's result, error included).
func (c *Cache) Get(text []byte) (*Filter, error) {
	c.mu.RLock()
	e, ok := c.m[string(text)]
	c.mu.RUnlock()
	if ok {
		return e.f, e.err
	}
	f, err := Parse(text)
	c.mu.Lock()
	if len(c.m) >= c.size {
		clear(c.m)
	}
	c.m[string(text)] = cached{f: f, err: err}
	c.mu.Unlock()
	return f, err
}

// Len is how many filters c holds.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
