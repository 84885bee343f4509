package config

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotproxy/slotproxy/internal/testdb"
)

// tlsFiles writes a CA, a certificate it signed with its key, an unrelated
// key and a non-PEM file under dir/certs, as the test configs below expect.
func tlsFiles(t *testing.T, dir string) {
	t.Helper()
	ca := newCA(t, "test CA")
	leaf := newServerCert(t, ca, "db.internal")
	other := newCA(t, "other")
	writeFile(t, dir, "certs/ca.pem", ca.certPEM)
	writeFile(t, dir, "certs/cert.pem", leaf.certPEM)
	writeFile(t, dir, "certs/key.pem", leaf.keyPEM)
	writeFile(t, dir, "certs/other-key.pem", other.keyPEM)
	writeFile(t, dir, "certs/garbage.pem", []byte("not PEM\n"))
}

const fullConfig = `# every key set
listen: "[::1]:4000"
backend:
  address: db.internal:3306
  proxy_protocol: yes
  tls:
    mode: verify-identity
    ca: certs/ca.pem
    cert: certs/cert.pem
    key: certs/key.pem
    server_name: mysql.internal
tls:
  cert: certs/cert.pem
  key: certs/key.pem
  min_version: 1.3
timeouts:
  connect: 1s
  handshake: 1m30s
  shutdown: 500ms
  client_write: 2m
limits:
  max_unauthenticated: 7
  max_handshake_queue: 70
  max_statement_bytes: 700
  max_concurrent_rewrites: 0
  queue_wait: 250ms
log:
  level: debug
  format: json
rules: rules.d
slots_table: my_slots
admin:
  user: slotproxy
  password: "s3cret: yes"
rollup:
  enabled: no
  interval: 250ms
  batch: 50
retries: 5
coalesce: false
consolidate: false
metrics:
  listen: "[::1]:9400"
slot_partition:
  count: 3
  index: 2
`

func TestLoadFull(t *testing.T) {
	t.Setenv(AdminPasswordEnv, "from the environment")
	dir := t.TempDir()
	tlsFiles(t, dir)
	writeFile(t, dir, "rules.d/repos.yaml", []byte("table: app.repos\n"))
	path := writeFile(t, dir, "slotproxy.yaml", []byte(fullConfig))

	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	certs := filepath.Join(dir, "certs")
	want := &Config{
		Listen: "[::1]:4000",
		Backend: Backend{
			Address: "db.internal:3306",
			TLS: BackendTLS{
				Mode:       TLSVerifyIdentity,
				CA:         filepath.Join(certs, "ca.pem"),
				Cert:       filepath.Join(certs, "cert.pem"),
				Key:        filepath.Join(certs, "key.pem"),
				ServerName: "mysql.internal",
			},
			ProxyProtocol: true,
		},
		TLS: ClientTLS{
			Generate:   true,
			Cert:       filepath.Join(certs, "cert.pem"),
			Key:        filepath.Join(certs, "key.pem"),
			MinVersion: tls.VersionTLS13,
		},
		Timeouts:      Timeouts{Connect: time.Second, Handshake: 90 * time.Second, Shutdown: 500 * time.Millisecond, ClientWrite: 2 * time.Minute},
		Limits:        Limits{MaxUnauthenticated: 7, MaxHandshakeQueue: 70, MaxStatementBytes: 700, QueueWait: 250 * time.Millisecond},
		Log:           Log{Level: slog.LevelDebug, Format: LogJSON},
		Rules:         filepath.Join(dir, "rules.d"),
		SlotsTable:    "my_slots",
		Admin:         Admin{User: "slotproxy", Password: "s3cret: yes"},
		Rollup:        Rollup{Enabled: false, Interval: 250 * time.Millisecond, Batch: 50},
		Retries:       5,
		Consolidate:   false,
		Coalesce:      false,
		Metrics:       Metrics{Listen: "[::1]:9400"},
		SlotPartition: SlotPartition{Count: 3, Index: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load:\n got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}

	backend, err := got.BackendTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if backend.ServerName != "mysql.internal" || backend.InsecureSkipVerify || backend.RootCAs == nil || len(backend.Certificates) != 1 {
		t.Errorf("BackendTLSConfig = %+v, want verification of mysql.internal against the CA, with a client certificate", backend)
	}
	client, generated, err := got.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if generated != "" {
		t.Errorf("generated a certificate although tls.cert is set")
	}
	if client == nil || len(client.Certificates) != 1 || client.MinVersion != tls.VersionTLS13 {
		t.Errorf("ClientTLSConfig = %+v, want one certificate and TLS 1.3", client)
	}
}

func TestLoadShortForms(t *testing.T) {
	t.Setenv(AdminPasswordEnv, "")
	for _, tc := range []struct {
		name, yaml string
		want       func(*Config)
	}{
		{"scalar backend", "listen: 127.0.0.1:3307\nbackend: 127.0.0.1:3306\n", func(c *Config) {
			c.Listen, c.Backend.Address = "127.0.0.1:3307", "127.0.0.1:3306"
		}},
		{"empty file", "", func(*Config) {}},
		{"comments only", "# nothing yet\n", func(*Config) {}},
		{"null values keep defaults", "listen:\nbackend: ~\ntimeouts:\n  connect:\nlog: {}\n", func(*Config) {}},
		{"alias", "listen: &addr 127.0.0.1:3307\nbackend: *addr\n", func(c *Config) {
			c.Listen, c.Backend.Address = "127.0.0.1:3307", "127.0.0.1:3307"
		}},
		{"empty host", "listen: \":3307\"\n", func(c *Config) { c.Listen = ":3307" }},
		{"metrics disabled", "metrics:\n  listen: \"\"\n", func(c *Config) { c.Metrics.Listen = "" }},
		{"metrics listen null keeps the default", "metrics:\n  listen:\n", func(*Config) {}},
		{"metrics on every interface", "metrics: {listen: \":9307\"}\n", func(c *Config) { c.Metrics.Listen = ":9307" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "c.yaml", []byte(tc.yaml))
			got, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			want := Default()
			tc.want(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Load:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestLoadRepoConfig keeps the example at the repository root loadable.
func TestLoadRepoConfig(t *testing.T) {
	t.Setenv(AdminPasswordEnv, "")
	c, err := Load("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Listen, want.Backend.Address = "127.0.0.1:3307", "127.0.0.1:3306"
	if !reflect.DeepEqual(c, want) {
		t.Errorf("config.yaml:\n got %+v\nwant the defaults with listen and backend set: %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	// TLS by default, as MySQL does it: to the backend when it offers
	// it, and to clients with a certificate made at start.
	if cfg, err := c.BackendTLSConfig(); cfg == nil || err != nil || !cfg.InsecureSkipVerify || !c.BackendTLSPreferred() {
		t.Errorf("BackendTLSConfig = %v, %v; want TLS preferred, unverified", cfg, err)
	}
	cfg, generated, err := c.ClientTLSConfig()
	if err != nil || cfg == nil || len(cfg.Certificates) != 1 || len(generated) != 95 {
		t.Errorf("ClientTLSConfig = %v, %q, %v; want a generated certificate and its fingerprint", cfg, generated, err)
	}
}

// TestLoadRulesConfig keeps testdata/config-rules.yaml loadable.
func TestLoadRulesConfig(t *testing.T) {
	t.Setenv(AdminPasswordEnv, "pw")
	c, err := Load("../../testdata/config-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Listen, want.Backend.Address = "127.0.0.1:3307", "127.0.0.1:3306"
	want.Rules = filepath.Join("../../testdata", "rules")
	want.Admin = Admin{User: "slotproxy", Password: "pw"}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("testdata/config-rules.yaml:\n got %+v\nwant %+v", c, want)
	}
}

// TestAdminPasswordEnv checks that the environment supplies an empty
// admin.password and nothing else.
func TestAdminPasswordEnv(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "rules/r.yaml", []byte("# empty\n"))
	for _, tc := range []struct {
		name, yaml, env, want string
	}{
		{"from the environment", "rules: rules\nadmin:\n  user: u\n", "envpw", "envpw"},
		{"empty in the file", "rules: rules\nadmin:\n  user: u\n  password: \"\"\n", "envpw", "envpw"},
		{"null in the file", "rules: rules\nadmin:\n  user: u\n  password:\n", "envpw", "envpw"},
		{"the file wins", "rules: rules\nadmin:\n  user: u\n  password: filepw\n", "envpw", "filepw"},
		{"neither", "rules: rules\nadmin:\n  user: u\n", "", ""},
		{"without rules", "admin:\n  user: u\n", "envpw", "envpw"},
		{"number", "admin:\n  password: 1234\n", "envpw", "1234"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(AdminPasswordEnv, tc.env)
			c, err := Load(writeFile(t, dir, "c.yaml", []byte(tc.yaml)))
			if err != nil {
				t.Fatal(err)
			}
			if c.Admin.Password != tc.want {
				t.Errorf("admin password = %q, want %q", c.Admin.Password, tc.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	tlsFiles(t, dir)
	writeFile(t, dir, "rules/r.yaml", []byte("# a rule\n"))
	for _, tc := range []struct {
		name string
		yaml string
		line int    // expected line; the message must contain "FILE:LINE: "
		want string // expected message after "FILE:LINE: "
	}{
		{"unknown key", "listen: 127.0.0.1:3307\nlsiten: 127.0.0.1:3307\n",
			2, `unknown key "lsiten" (did you mean "listen"?)`},
		{"unknown nested key", "backend:\n  address: h:1\n  tls:\n    mod: verify-ca\n",
			4, `backend.tls: unknown key "mod" (did you mean "mode"?)`},
		{"unknown key without near match", "# top\nfrobnicate: 1\n",
			2, `unknown key "frobnicate" (want one of: admin, backend, coalesce, consolidate, limits, listen, log, metrics, retries, rollup, rules, slot_partition, slots_table, timeouts, tls)`},
		{"metrics listen without port", "# x\nmetrics:\n  listen: localhost\n",
			3, `metrics.listen: "localhost": missing port in address (want HOST:PORT)`},
		{"metrics listen port zero", "metrics:\n  listen: 127.0.0.1:0\n",
			2, `metrics.listen: "127.0.0.1:0": port "0" is not a number from 1 to 65535`},
		{"metrics listen is listen", "listen: 127.0.0.1:3307\nmetrics:\n  listen: 127.0.0.1:3307\n",
			3, `metrics.listen: "127.0.0.1:3307" is also listen, where clients connect; choose another port`},
		{"metrics not a mapping", "metrics: 127.0.0.1:9307\n",
			1, `metrics: want a mapping of keys to values, got "127.0.0.1:9307"`},
		{"metrics unknown key", "metrics:\n  address: 127.0.0.1:9307\n",
			2, `metrics: unknown key "address" (want one of: listen)`},
		{"rollup enabled not a boolean", "rollup:\n  enabled: maybe\n",
			2, `rollup.enabled: want true or false, got "maybe"`},
		{"rollup batch zero", "rollup:\n  interval: 1s\n  batch: 0\n",
			3, `rollup.batch: must be positive, got 0`},
		{"slot partition count zero", "slot_partition:\n  count: 0\n",
			2, `slot_partition.count: 0: want auto or a number of parts, 1 or more`},
		{"slot partition index beyond count", "slot_partition:\n  count: 3\n  index: 3\n",
			3, `slot_partition.index: 3: want auto or a part from 0 to count - 1`},
		{"slot partition index not a number", "slot_partition:\n  index: first\n",
			2, `slot_partition.index: want auto or a whole number, got "first"`},
		{"retries negative", "# x\nretries: -1\n",
			2, `retries: must be between 0 and 100, got -1`},
		{"duplicate key", "listen: a:1\n\nlisten: b:2\n",
			3, `duplicate key "listen" (first on line 1)`},
		{"listen without port", "# first\nlisten: localhost\n",
			2, `listen: "localhost": missing port in address (want HOST:PORT)`},
		{"listen port out of range", "listen: localhost:65536\n",
			1, `listen: "localhost:65536": port "65536" is not a number from 1 to 65535`},
		{"listen port not numeric", "listen: localhost:mysql\n",
			1, `listen: "localhost:mysql": port "mysql" is not a number from 1 to 65535`},
		{"listen not a scalar", "listen: [a, b]\n",
			1, `listen: want a single value, got a list`},
		{"scalar backend bad address", "listen: a:1\nbackend: db\n",
			2, `backend.address: "db": missing port in address (want HOST:PORT)`},
		{"backend address bad", "backend:\n  tls:\n    mode: disabled\n  address: db:0\n",
			4, `backend.address: "db:0": port "0" is not a number from 1 to 65535`},
		{"section not a mapping", "timeouts: 5s\n",
			1, `timeouts: want a mapping of keys to values, got "5s"`},
		{"top level not a mapping", "- listen\n- backend\n",
			1, `want a mapping of keys to values, got a list`},
		{"duration without unit", "timeouts:\n  connect: 5\n",
			2, `timeouts.connect: invalid duration "5" (want Go syntax such as 5s, 500ms or 1m30s)`},
		{"duration zero", "timeouts:\n  handshake: 1s\n  shutdown: 0s\n",
			3, `timeouts.shutdown: must be positive, got 0s`},
		{"duration negative", "timeouts:\n  connect: -1s\n",
			2, `timeouts.connect: must be positive, got -1s`},
		{"max_unauthenticated not a number", "limits:\n  max_unauthenticated: lots\n",
			2, `limits.max_unauthenticated: want a whole number, got "lots"`},
		{"max_unauthenticated zero", "limits:\n  max_unauthenticated: 0\n",
			2, `limits.max_unauthenticated: must be positive, got 0`},
		{"max_concurrent_rewrites negative", "limits:\n  max_concurrent_rewrites: -1\n",
			2, `limits.max_concurrent_rewrites: must not be negative (0: no limit), got -1`},
		{"queue_wait zero", "limits:\n  queue_wait: 0s\n",
			2, `limits.queue_wait: must be positive, got 0s`},
		{"bad tls mode", "# example from the contract\nlisten: 127.0.0.1:3307\nbackend:\n  address: 127.0.0.1:3306\n\n  tls:\n    mode: maybe\n",
			7, `backend.tls.mode: unknown mode "maybe" (want disabled, preferred, required, verify-ca, verify-identity)`},
		{"verify-identity without host", "backend:\n  address: \":3306\"\n  tls:\n    mode: verify-identity\n",
			4, `backend.tls.mode: verify-identity needs backend.tls.server_name, since backend address ":3306" has no host`},
		{"ca with mode required", "backend:\n  tls:\n    mode: required\n    ca: certs/ca.pem\n",
			4, `backend.tls.ca: mode "required" does not verify the server, so a CA has no effect (use verify-ca or verify-identity)`},
		{"ca not PEM", "backend:\n  tls:\n    mode: verify-ca\n    ca: certs/garbage.pem\n",
			4, `backend.tls.ca: ` + filepath.Join(dir, "certs/garbage.pem") + `: no PEM certificate found`},
		{"ca missing", "backend:\n  tls:\n    mode: verify-ca\n    ca: certs/nope.pem\n",
			4, `backend.tls.ca: open ` + filepath.Join(dir, "certs/nope.pem") + `: no such file or directory`},
		{"backend key without cert", "backend:\n  tls:\n    key: certs/key.pem\n",
			3, `backend.tls.key: set without backend.tls.cert`},
		{"cert without key", "tls:\n  cert: certs/cert.pem\n",
			2, `tls.cert: set without tls.key`},
		{"missing key file", "tls:\n  cert: certs/cert.pem\n  key: certs/missing.pem\n",
			3, `tls.key: open ` + filepath.Join(dir, "certs/missing.pem") + `: no such file or directory`},
		{"cert not PEM", "tls:\n  cert: certs/garbage.pem\n  key: certs/key.pem\n",
			2, `tls.cert: ` + filepath.Join(dir, "certs/garbage.pem") + `: no PEM certificate found`},
		{"key does not match cert", "tls:\n  cert: certs/cert.pem\n  key: certs/other-key.pem\n",
			3, `tls.key: ` + filepath.Join(dir, "certs/other-key.pem") + ` (for ` + filepath.Join(dir, "certs/cert.pem") + `): tls: private key does not match public key`},
		{"bad min_version", "tls:\n  min_version: 1.4\n",
			2, `tls.min_version: unknown TLS version "1.4" (want 1.0, 1.1, 1.2, 1.3)`},
		{"bad log level", "log:\n  level: verbose\n",
			2, `log.level: unknown level "verbose" (want debug, info, warn, error)`},
		{"bad log format", "log:\n  format: xml\n",
			2, `log.format: unknown format "xml" (want text, json)`},
		{"YAML scanner error", "listen: a:1\nbackend: x\n  address: y\n",
			3, `invalid YAML: mapping values are not allowed in this context`},
		{"YAML scanner error on line 1", "listen: a: b\n",
			1, `invalid YAML: mapping values are not allowed in this context`},
		{"YAML tab", "listen: a:1\n\tbackend: x\n",
			2, `invalid YAML: found a tab character that violates indentation`},
		{"YAML parser error", "listen: a:1\nbackend:\n  address: h:1\n tls: {}\n",
			4, `invalid YAML: did not find expected key`},
		{"YAML unclosed flow", "listen: a:1\nbackend: [h:1\nlog: {}\n",
			2, `invalid YAML: did not find expected ',' or ']'`},
		{"two documents", "listen: a:1\n---\nlisten: b:2\n",
			2, `more than one YAML document`},
		{"slots_table empty", "listen: a:1\nslots_table: \"\"\n",
			2, `slots_table: empty table name`},
		{"slots_table too long", "slots_table: " + strings.Repeat("s", 65) + "\n",
			1, `slots_table: "` + strings.Repeat("s", 65) + `" is 65 characters long; MySQL allows at most 64`},
		{"slots_table trailing space", "slots_table: \"slots \"\n",
			1, `slots_table: "slots " ends with a space; MySQL does not allow that`},
		{"slots_table is the registry", "# x\nslots_table: SlotProxy_Record_Types\n",
			2, `slots_table: "SlotProxy_Record_Types" is the name of the record-type registry; choose another`},
		{"slots_table not a scalar", "slots_table: [a]\n",
			1, `slots_table: want a single value, got a list`},
		{"rules missing", "admin:\n  user: u\nrules: nope\n",
			3, `rules: stat ` + filepath.Join(dir, "nope") + `: no such file or directory`},
		{"rules is a file", "admin:\n  user: u\nrules: rules/r.yaml\n",
			3, `rules: ` + filepath.Join(dir, "rules/r.yaml") + ` is not a directory`},
		{"rules without admin", "listen: a:1\nrules: rules\n",
			2, `admin.user: not set; with rules the proxy needs its own account on the backend (admin: {user, password})`},
		{"rules with empty admin user", "rules: rules\nadmin:\n  user: \"\"\n",
			1, `admin.user: not set; with rules the proxy needs its own account on the backend (admin: {user, password})`},
		{"admin unknown key", "admin:\n  user: u\n  pasword: x\n",
			3, `admin: unknown key "pasword" (did you mean "password"?)`},
		{"admin not a mapping", "admin: root\n",
			1, `admin: want a mapping of keys to values, got "root"`},
		{"admin user not a scalar", "admin:\n  user: {a: b}\n",
			2, `admin.user: want a single value, got a mapping`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml", []byte(tc.yaml))
			c, err := Load(path)
			if err == nil {
				t.Fatalf("Load succeeded: %+v", c)
			}
			if want := path + ":" + strconv.Itoa(tc.line) + ": " + tc.want; err.Error() != want {
				t.Errorf("Load error\n got %s\nwant %s", err, want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.File != path || ce.Line != tc.line {
				t.Errorf("Load error = %#v, want an *Error for %s:%d", err, path, tc.line)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file = %v, want an error wrapping fs.ErrNotExist", err)
	}
}

func TestValidate(t *testing.T) {
	c := Default()
	for _, want := range []string{"listen: not set", "backend.address: not set"} {
		if err := c.Validate(); err == nil || err.Error() != want {
			t.Fatalf("Validate = %v, want %q", err, want)
		}
		if c.Listen == "" {
			c.Listen = "127.0.0.1:3307"
		} else {
			c.Backend.Address = "127.0.0.1:3306"
		}
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate of defaults with addresses = %v", err)
	}
	c.Backend.Address = "db"
	if err := c.Validate(); err == nil || err.Error() != `backend.address: "db": missing port in address (want HOST:PORT)` {
		t.Errorf("Validate with a bad address = %v", err)
	}
	c.Backend.Address = "db:3306"
	c.Backend.TLS.Mode = "on"
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), `backend.tls.mode: unknown mode "on"`) {
		t.Errorf("Validate with a bad mode = %v", err)
	}
}

func TestValidateRules(t *testing.T) {
	c := Default()
	c.Listen, c.Backend.Address = "127.0.0.1:3307", "127.0.0.1:3306"
	c.Rules = t.TempDir()
	want := "admin.user: not set; with rules the proxy needs its own account on the backend (admin: {user, password})"
	if err := c.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate with rules and no admin = %v, want %q", err, want)
	}
	c.Admin.User = "slotproxy"
	if err := c.Validate(); err != nil {
		t.Errorf("Validate with rules and an admin = %v", err)
	}
	c.SlotsTable = ""
	if err := c.Validate(); err == nil || err.Error() != "slots_table: empty table name" {
		t.Errorf("Validate with an empty slots_table = %v", err)
	}
}

func TestCheckAddress(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:3306", true},
		{"db.internal:1", true},
		{":3307", true},
		{"[::1]:65535", true},
		{"", false},
		{"db", false},
		{"::1:3306", false},
		{"db:", false},
		{"db:0", false},
		{"db:+1", false},
		{"db:65536", false},
	} {
		if err := CheckAddress(tc.addr); (err == nil) != tc.ok {
			t.Errorf("CheckAddress(%q) = %v, want ok=%v", tc.addr, err, tc.ok)
		}
	}
}

func TestLogger(t *testing.T) {
	c := Default()
	c.Log = Log{Level: slog.LevelWarn, Format: LogJSON}
	var buf bytes.Buffer
	l := c.Logger(&buf)
	l.Info("hidden")
	l.Warn("shown", "k", "v")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("want exactly one JSON record, got %q: %v", buf.String(), err)
	}
	if rec["msg"] != "shown" || rec["k"] != "v" {
		t.Errorf("record = %v", rec)
	}

	buf.Reset()
	c.Log = Log{Level: slog.LevelDebug, Format: LogText}
	c.Logger(&buf).Debug("details")
	if got := buf.String(); !strings.Contains(got, "level=DEBUG msg=details") {
		t.Errorf("text record = %q", got)
	}
}

func TestErrorFormat(t *testing.T) {
	inner := errors.New("boom")
	for _, tc := range []struct {
		err  *Error
		want string
	}{
		{&Error{File: "c.yaml", Line: 3, Key: "a.b", Err: inner}, "c.yaml:3: a.b: boom"},
		{&Error{File: "c.yaml", Key: "a.b", Err: inner}, "c.yaml: a.b: boom"},
		{&Error{Key: "a.b", Err: inner}, "a.b: boom"},
		{&Error{File: "c.yaml", Line: 1, Err: inner}, "c.yaml:1: boom"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%#v.Error() = %q, want %q", tc.err, got, tc.want)
		}
		if !errors.Is(tc.err, inner) {
			t.Errorf("%#v does not unwrap to its Err", tc.err)
		}
	}
}

// TestBackendTLSModes checks what each mode accepts, by handshaking with an
// in-memory server.
func TestBackendTLSModes(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "backend CA")
	caPath := writeFile(t, dir, "ca.pem", ca.certPEM)
	// The backend's certificate names db.internal only, not the 127.0.0.1
	// the proxy dials.
	trusted := newServerCert(t, ca, "db.internal")
	untrusted := newServerCert(t, newCA(t, "someone else"), "db.internal")
	selfSigned := newCA(t, "db.internal")
	client := newServerCert(t, ca, "proxy")
	clientCert := writeFile(t, dir, "client.pem", client.certPEM)
	clientKey := writeFile(t, dir, "client-key.pem", client.keyPEM)

	for _, tc := range []struct {
		name       string
		tls        BackendTLS
		server     *testCert
		ok         bool
		clientCert bool // whether the backend must receive a client certificate
	}{
		{"required accepts anything", BackendTLS{Mode: TLSRequired}, selfSigned, true, false},
		{"verify-ca ignores the name", BackendTLS{Mode: TLSVerifyCA, CA: caPath}, trusted, true, false},
		{"verify-ca rejects another CA", BackendTLS{Mode: TLSVerifyCA, CA: caPath}, untrusted, false, false},
		{"verify-ca rejects self-signed", BackendTLS{Mode: TLSVerifyCA, CA: caPath}, selfSigned, false, false},
		{"verify-identity checks the address host", BackendTLS{Mode: TLSVerifyIdentity, CA: caPath}, trusted, false, false},
		{"verify-identity with server_name", BackendTLS{Mode: TLSVerifyIdentity, CA: caPath, ServerName: "db.internal"}, trusted, true, false},
		{"verify-identity rejects another CA", BackendTLS{Mode: TLSVerifyIdentity, CA: caPath, ServerName: "db.internal"}, untrusted, false, false},
		{"client certificate", BackendTLS{Mode: TLSVerifyCA, CA: caPath, Cert: clientCert, Key: clientKey}, trusted, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Listen, c.Backend.Address, c.Backend.TLS = "127.0.0.1:3307", "127.0.0.1:3306", tc.tls
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			cfg, err := c.BackendTLSConfig()
			if err != nil {
				t.Fatal(err)
			}
			server := &tls.Config{
				Certificates:           []tls.Certificate{tc.server.tlsCert(t)},
				ClientAuth:             tls.RequestClientCert,
				SessionTicketsDisabled: true,
			}
			state, err := handshake(t, cfg, server)
			if ok := err == nil; ok != tc.ok {
				t.Fatalf("handshake error = %v, want success=%v", err, tc.ok)
			}
			if gotCert := len(state.PeerCertificates) > 0; err == nil && gotCert != tc.clientCert {
				t.Errorf("backend received a client certificate: %v, want %v", gotCert, tc.clientCert)
			}
		})
	}

	c := Default()
	c.Backend.Address = "127.0.0.1:3306"
	c.Backend.TLS.Mode = TLSDisabled
	if cfg, err := c.BackendTLSConfig(); cfg != nil || err != nil {
		t.Errorf("mode disabled: BackendTLSConfig = %v, %v; want nil, nil", cfg, err)
	}
}

// handshake runs a TLS handshake between client and server over loopback
// TCP (net.Pipe is unbuffered, so a client that aborts mid-flight would
// deadlock against a server still writing) and returns the client's error and
// the server's view of the connection.
func handshake(t *testing.T, client, server *tls.Config) (tls.ConnectionState, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		state tls.ConnectionState
		err   error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		conn := tls.Server(c, server)
		err = conn.HandshakeContext(ctx)
		done <- result{conn.ConnectionState(), err}
	}()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	err = tls.Client(c, client).HandshakeContext(ctx)
	c.Close()
	r := <-done
	return r.state, err
}

// TestLoadDockerConfig keeps docker/slotproxy.yaml, the configuration of
// docker-compose.yml (which CI cannot run), loadable and as documented.
func TestLoadDockerConfig(t *testing.T) {
	t.Setenv(AdminPasswordEnv, "root-pass")
	// As in the container: the rules directory next to the file.
	data, err := os.ReadFile("../../docker/slotproxy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, dir, "rules/repos.yaml", []byte("# mounted from testdata/rules\n"))
	writeFile(t, dir, "config.yaml", data)
	c, err := Load(filepath.Join(dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Listen, want.Backend.Address = "0.0.0.0:3307", "mysql:3306"
	want.Rules = filepath.Join(dir, "rules")
	want.Admin = Admin{User: "root", Password: "root-pass"}
	want.Metrics.Listen = "0.0.0.0:9307"
	if !reflect.DeepEqual(c, want) {
		t.Errorf("docker/slotproxy.yaml:\n got %+v\nwant %+v", c, want)
	}
}

// TestDockerComposeMySQLVersion: docker-compose.yml runs the MySQL version
// the test suite runs (the MySQL chroot's mysqld, without its Debian
// revision).
func TestDockerComposeMySQLVersion(t *testing.T) {
	v, err := testdb.ServerVersion(testdb.MySQL)
	if err != nil {
		t.Fatal(err)
	}
	upstream, _, _ := strings.Cut(v, "-")
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*image:\s*mysql:(\S+)\s*$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("docker-compose.yml has no mysql image")
	}
	if string(m[1]) != upstream {
		t.Errorf("docker-compose.yml runs mysql:%s; the tests run MySQL %s (%s)", m[1], upstream, v)
	}
}

// stackErr prints a stack trace under %+v, as pingcap/errors' errors do.
type stackErr struct{}

func (stackErr) Error() string { return "the message" }
func (e stackErr) Format(f fmt.State, verb rune) {
	if f.Flag('+') {
		fmt.Fprint(f, "the message\ngoroutine 1 [running]:\nmain.main()\n\t/x.go:1")
		return
	}
	fmt.Fprint(f, e.Error())
}

// TestLoggerErrorsWithoutStacks: an error in a log line is its message,
// in both formats, never a stack trace.
func TestLoggerErrorsWithoutStacks(t *testing.T) {
	for _, format := range []LogFormat{LogText, LogJSON} {
		c := Default()
		c.Log.Format = format
		var b strings.Builder
		c.Logger(&b).Warn("roll-up pass failed", "err", stackErr{})
		if strings.Contains(b.String(), "goroutine") || !strings.Contains(b.String(), "the message") {
			t.Errorf("%s log line: %q", format, b.String())
		}
	}
}
