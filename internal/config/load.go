package config

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/slotproxy/slotproxy/internal/yamlkeys"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Load reads the YAML file at path over Default and checks it: unknown or
// duplicate keys, malformed values, and TLS files that are unreadable or do
// not parse are all errors. A failure is returned as an *Error naming path,
// the line and the key (other than when the file cannot be read at all).
//
// A key with an empty value ("key:" or "key: ~") keeps its default, and an
// empty file yields Default. Listen and Backend.Address may be left out, for
// flags to supply; Validate then requires them. Relative TLS file paths are
// resolved against the directory of path, as is the rules directory.
// Durations use Go syntax ("5s"). An empty admin.password is taken from
// the environment variable AdminPasswordEnv.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	s := &source{file: path, lines: map[string]int{}}
	root, err := parseYAML(s, data)
	if err != nil {
		return nil, err
	}
	c := Default()
	if root != nil {
		d := &decoder{source: s, dir: filepath.Dir(path)}
		if err := d.config(root, c); err != nil {
			return nil, err
		}
	}
	if c.Admin.Password == "" {
		c.Admin.Password = os.Getenv(AdminPasswordEnv)
	}
	if err := c.check(s); err != nil {
		return nil, err
	}
	return c, nil
}

// parseYAML parses data, which must hold at most one YAML document, and
// returns the document's top node, or nil if data holds no document.
func parseYAML(s *source, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, nil
	} else if err != nil {
		return nil, s.syntaxError(err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return nil, s.errAt(next.Line, "", errors.New("more than one YAML document"))
	} else if !errors.Is(err, io.EOF) {
		return nil, s.syntaxError(err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, s.errAt(doc.Line, "", errors.New("not a YAML document"))
	}
	return doc.Content[0], nil
}

// decoder copies the YAML tree onto a Config. It checks only shape and
// syntax (mapping or scalar, duration and number syntax, word lists); value
// checks that Validate shares live in Config.check. It records the line of
// every key it meets in source.lines for those checks.
type decoder struct {
	*source
	dir string // directory of the file, for relative paths
}

// handler decodes the value of one key; key is its dotted path.
type handler func(v *yaml.Node, key string) error

// fields maps the keys of a mapping to their handlers.
type fields map[string]handler

// config decodes the top-level mapping n onto c.
func (d *decoder) config(n *yaml.Node, c *Config) error {
	return d.mapping(n, "", fields{
		"listen":  text(d, &c.Listen),
		"backend": d.backend(&c.Backend),
		"tls": func(v *yaml.Node, key string) error {
			return d.mapping(v, key, fields{
				"cert":        d.path(&c.TLS.Cert),
				"key":         d.path(&c.TLS.Key),
				"min_version": d.tlsVersion(&c.TLS.MinVersion),
				"generate":    d.boolean(&c.TLS.Generate),
			})
		},
		"timeouts": func(v *yaml.Node, key string) error {
			return d.mapping(v, key, fields{
				"connect":      d.duration(&c.Timeouts.Connect),
				"handshake":    d.duration(&c.Timeouts.Handshake),
				"shutdown":     d.duration(&c.Timeouts.Shutdown),
				"client_write": d.duration(&c.Timeouts.ClientWrite),
			})
		},
		"limits": func(v *yaml.Node, key string) error {
			return d.mapping(v, key, fields{
				"max_unauthenticated":     d.integer(&c.Limits.MaxUnauthenticated),
				"max_handshake_queue":     d.integer(&c.Limits.MaxHandshakeQueue),
				"max_statement_bytes":     d.integer(&c.Limits.MaxStatementBytes),
				"max_concurrent_rewrites": d.integer(&c.Limits.MaxConcurrentRewrites),
				"queue_wait":              d.duration(&c.Limits.QueueWait),
			})
		},
		"log": func(v *yaml.Node, key string) error {
			return d.mapping(v, key, fields{
				"level":  d.level(&c.Log.Level),
				"format": text(d, &c.Log.Format),
			})
		},
		"rules":       d.path(&c.Rules),
		"slots_table": text(d, &c.SlotsTable),
		"admin": func(v *yaml.Node, key string) error {
			return d.mapping(v, key, fields{
				"user":     text(d, &c.Admin.User),
				"password": text(d, &c.Admin.Password),
			})
		},
		"rollup": func(v *yaml.Node, key string) error {
			return d.mapping(v, key, fields{
				"enabled":  d.boolean(&c.Rollup.Enabled),
				"interval": d.durationOrAuto(&c.Rollup.Interval),
				"batch":    d.integer(&c.Rollup.Batch),
			})
		},
		"retries":     d.integer(&c.Retries),
		"coalesce":    d.boolean(&c.Coalesce),
		"consolidate": d.boolean(&c.Consolidate),
		"slot_partition": func(v *yaml.Node, key string) error {
			return d.mapping(v, key, fields{
				"count": d.integerOrAuto(&c.SlotPartition.Count),
				"index": d.integerOrAuto(&c.SlotPartition.Index),
			})
		},
		"metrics": func(v *yaml.Node, key string) error {
			return d.mapping(v, key, fields{
				"listen": text(d, &c.Metrics.Listen),
			})
		},
	})
}

// boolean stores true or false.
func (d *decoder) boolean(dst *bool) handler {
	return func(v *yaml.Node, key string) error {
		s, err := d.scalar(v, key)
		if err != nil {
			return err
		}
		switch strings.ToLower(s) {
		case "true", "yes", "on":
			*dst = true
		case "false", "no", "off":
			*dst = false
		default:
			return d.errAt(v.Line, key, fmt.Errorf("want true or false, got %q", s))
		}
		return nil
	}
}

// backend decodes the backend section, either a mapping or, as a shorthand
// for its address alone, a scalar.
func (d *decoder) backend(b *Backend) handler {
	return func(v *yaml.Node, key string) error {
		if v.Kind == yaml.ScalarNode {
			d.lines[key+".address"] = d.lines[key]
			b.Address = v.Value
			return nil
		}
		return d.mapping(v, key, fields{
			"address":        text(d, &b.Address),
			"proxy_protocol": d.boolean(&b.ProxyProtocol),
			"tls": func(v *yaml.Node, key string) error {
				return d.mapping(v, key, fields{
					"mode":        text(d, &b.TLS.Mode),
					"ca":          d.path(&b.TLS.CA),
					"cert":        d.path(&b.TLS.Cert),
					"key":         d.path(&b.TLS.Key),
					"server_name": text(d, &b.TLS.ServerName),
				})
			},
		})
	}
}

// mapping decodes the mapping n found at key path (empty at the top) by
// calling the handler of each of its keys in file order. Unknown and
// duplicate keys are errors; a key whose value is null keeps its default.
func (d *decoder) mapping(n *yaml.Node, path string, fs fields) error {
	if n.Kind != yaml.MappingNode {
		return d.errAt(n.Line, path, fmt.Errorf("want a mapping of keys to values, got %s", describe(n)))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := yamlkeys.Resolve(n.Content[i]), yamlkeys.Resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			return d.errAt(k.Line, path, fmt.Errorf("want a key, got %s", describe(k)))
		}
		name := k.Value
		handle, ok := fs[name]
		if !ok {
			return d.errAt(k.Line, path, unknownKey(name, fs))
		}
		if first, dup := seen[name]; dup {
			return d.errAt(k.Line, path, fmt.Errorf("duplicate key %q (first on line %d)", name, first))
		}
		seen[name] = k.Line
		key := name
		if path != "" {
			key = path + "." + name
		}
		d.lines[key] = k.Line
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			continue
		}
		if err := handle(v, key); err != nil {
			return err
		}
	}
	return nil
}

// unknownKey describes the unknown key name, suggesting the nearest known
// one or else listing them all.
func unknownKey(name string, fs fields) error {
	known := make([]string, 0, len(fs))
	for k := range fs {
		known = append(known, k)
	}
	slices.Sort(known)
	return errors.New(yamlkeys.Unknown(name, known))
}

// describe names the kind of n for error messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	default:
		return "something else"
	}
}

// scalar returns the text of the single value v.
func (d *decoder) scalar(v *yaml.Node, key string) (string, error) {
	if v.Kind != yaml.ScalarNode {
		return "", d.errAt(v.Line, key, fmt.Errorf("want a single value, got %s", describe(v)))
	}
	return v.Value, nil
}

// text stores a scalar as is; Config.check judges it.
func text[T ~string](d *decoder, dst *T) handler {
	return func(v *yaml.Node, key string) error {
		s, err := d.scalar(v, key)
		*dst = T(s)
		return err
	}
}

// path stores a file path, resolving a relative one against d.dir.
func (d *decoder) path(dst *string) handler {
	return func(v *yaml.Node, key string) error {
		s, err := d.scalar(v, key)
		if err != nil {
			return err
		}
		if s != "" && !filepath.IsAbs(s) {
			s = filepath.Join(d.dir, s)
		}
		*dst = s
		return nil
	}
}

// duration stores a Go-syntax duration such as "5s" or "1m30s".
func (d *decoder) duration(dst *time.Duration) handler {
	return func(v *yaml.Node, key string) error {
		s, err := d.scalar(v, key)
		if err != nil {
			return err
		}
		if *dst, err = time.ParseDuration(s); err != nil {
			return d.errAt(v.Line, key, fmt.Errorf("invalid duration %q (want Go syntax such as 5s, 500ms or 1m30s)", s))
		}
		return nil
	}
}

// integer stores a decimal integer.
func (d *decoder) integer(dst *int) handler {
	return func(v *yaml.Node, key string) error {
		s, err := d.scalar(v, key)
		if err != nil {
			return err
		}
		if *dst, err = strconv.Atoi(s); err != nil {
			return d.errAt(v.Line, key, fmt.Errorf("want a whole number, got %q", s))
		}
		return nil
	}
}

// integerOrAuto stores a decimal integer, or Auto for "auto".
func (d *decoder) integerOrAuto(dst *int) handler {
	return func(v *yaml.Node, key string) error {
		s, err := d.scalar(v, key)
		if err != nil {
			return err
		}
		if strings.EqualFold(s, "auto") {
			*dst = Auto
			return nil
		}
		if *dst, err = strconv.Atoi(s); err != nil {
			return d.errAt(v.Line, key, fmt.Errorf("want auto or a whole number, got %q", s))
		}
		return nil
	}
}

// durationOrAuto stores a duration, or 0 for auto.
func (d *decoder) durationOrAuto(dst *time.Duration) handler {
	return func(v *yaml.Node, key string) error {
		s, err := d.scalar(v, key)
		if err != nil {
			return err
		}
		if strings.EqualFold(s, "auto") {
			*dst = 0
			return nil
		}
		if *dst, err = time.ParseDuration(s); err != nil || *dst <= 0 {
			return d.errAt(v.Line, key, fmt.Errorf("want auto or a positive duration such as 5s or 500ms, got %q", s))
		}
		return nil
	}
}

// levels are the accepted log.level words.
var levels = []struct {
	name  string
	level slog.Level
}{{"debug", slog.LevelDebug}, {"info", slog.LevelInfo}, {"warn", slog.LevelWarn}, {"error", slog.LevelError}}

// level stores a log level given as one of the words in levels.
func (d *decoder) level(dst *slog.Level) handler {
	return func(v *yaml.Node, key string) error {
		s, err := d.scalar(v, key)
		if err != nil {
			return err
		}
		for _, l := range levels {
			if s == l.name {
				*dst = l.level
				return nil
			}
		}
		return d.errAt(v.Line, key, fmt.Errorf("unknown level %q (want debug, info, warn, error)", s))
	}
}

// tlsVersions maps the accepted tls.min_version values to crypto/tls
// constants.
var tlsVersions = map[string]uint16{
	"1.0": tls.VersionTLS10,
	"1.1": tls.VersionTLS11,
	"1.2": tls.VersionTLS12,
	"1.3": tls.VersionTLS13,
}

// tlsVersion stores a TLS version given as "1.2" (quoted or not).
func (d *decoder) tlsVersion(dst *uint16) handler {
	return func(v *yaml.Node, key string) error {
		s, err := d.scalar(v, key)
		if err != nil {
			return err
		}
		ver, ok := tlsVersions[s]
		if !ok {
			return d.errAt(v.Line, key, fmt.Errorf("unknown TLS version %q (want 1.0, 1.1, 1.2, 1.3)", s))
		}
		*dst = ver
		return nil
	}
}
