// Package config loads and checks slotproxy's YAML configuration file.
//
// Load reports every problem as an *Error that names the file, the line and
// the key at fault, so a command can print it on one line. The package does
// no networking: it turns the file into plain values, *tls.Config values
// (BackendTLSConfig, ClientTLSConfig) and a *slog.Logger (Logger); the
// command wires those into the proxy. Besides the files the configuration
// names, Load reads one thing from outside the file: the environment
// variable AdminPasswordEnv, when admin.password is empty.
package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Config is slotproxy's configuration. Default returns the defaults and Load
// reads a file over them. Load and Validate guarantee that every field holds
// a legal value; file paths are then absolute or relative to the working
// directory (Load resolves the file's relative paths against the file's
// directory).
type Config struct {
	// Listen is the HOST:PORT clients connect to. HOST may be empty to
	// listen on every interface.
	Listen string
	// Backend is the MySQL or MariaDB server the proxy relays to.
	Backend Backend
	// TLS is what the proxy offers clients (client → proxy).
	TLS ClientTLS
	// Timeouts bound the phases of a connection and of shutdown.
	Timeouts Timeouts
	// Limits protect the proxy from connection floods.
	Limits Limits
	// Log selects what is logged and how.
	Log Log
	// Rules is the directory of rule files (every *.yaml and *.yml in it;
	// see package rules). Empty means no rules: every statement is relayed
	// unchanged and no admin account is needed. Load checks that it is a
	// directory; the files themselves are rules.LoadDir's business.
	Rules string
	// SlotsTable is the name of the slot table in each schema that has
	// rules; DefaultSlotsTable unless set. It may not be RecordTypesTable.
	SlotsTable string
	// Admin is the proxy's own account on the backend, used by migrate,
	// for loading the schema of ruled tables and for roll-up. Required
	// (Admin.User) when Rules is set.
	Admin Admin
	// Rollup is the background folding of slot rows into base rows while
	// serving with rules.
	Rollup Rollup
	// Retries bounds how often a rewritten autocommit statement is retried
	// after a deadlock or lock wait timeout (0 disables retries).
	Retries int
	// Coalesce sends concurrent autocommit increments of one record, alike
	// but for their deltas, to the backend as one increment by their sum,
	// each client answered as if alone (group commit for counters).
	Coalesce bool
	// Consolidate lets identical concurrent autocommit reads of counters
	// by one account share one query, each client answered as if alone.
	Consolidate bool
	// Metrics is serve's HTTP endpoint for Prometheus metrics and health
	// checks.
	Metrics Metrics
	// SlotPartition is the part of every rule's slots this proxy's
	// increments pick from, so that proxies in front of different nodes of
	// a multi-primary cluster never write one slot row (certification
	// would fail one of them at COMMIT).
	SlotPartition SlotPartition
}

// SlotPartition names this proxy's part of the slots: slot s is its own
// when s % Count == Index. Either may be Auto: serve then asks the backend
// (on Galera, wsrep_cluster_size and wsrep_local_index; in a Group
// Replication group, the ONLINE members and this one's place among them,
// ordered by MEMBER_ID; a single server is one part of one).
type SlotPartition struct {
	Count, Index int
}

// Auto is SlotPartition's "ask the backend".
const Auto = -1

// Metrics configures serve's HTTP endpoint (/metrics, /healthz, /readyz).
type Metrics struct {
	// Listen is the HOST:PORT the endpoint listens on; DefaultMetricsListen
	// unless set. Empty disables the endpoint. It may not equal Listen.
	Listen string
}

// DefaultMetricsListen is the default Metrics.Listen: loopback only, so
// that the endpoint is not exposed unless asked for.
const DefaultMetricsListen = "127.0.0.1:9307"

// Roll-up intervals of rollup.interval: auto (Rollup.Interval 0).
const (
	// SingleRollupInterval is the time between passes in front of one
	// server.
	SingleRollupInterval = time.Second
	// ClusterRollupInterval is the time between passes in front of a
	// multi-primary cluster (a slot partition of more than one part):
	// every fold that another node applies aborts that node's
	// transactions holding the record, and without reads: rolled_up
	// nothing needs folds sooner.
	ClusterRollupInterval = 10 * time.Second
)

// Rollup configures the background roll-up.
type Rollup struct {
	// Enabled runs roll-up inside serve (when rules are set).
	Enabled bool
	// Interval is the time between passes; 0 is auto (see Every).
	Interval time.Duration
	// Batch bounds the records folded per slot table and pass.
	Batch int
}

// Every is the time between passes: Interval, or when it is auto
// ClusterRollupInterval in front of a multi-primary cluster and
// SingleRollupInterval otherwise.
func (r Rollup) Every(cluster bool) time.Duration {
	switch {
	case r.Interval > 0:
		return r.Interval
	case cluster:
		return ClusterRollupInterval
	}
	return SingleRollupInterval
}

// Admin is the proxy's own backend account.
type Admin struct {
	// User is the account name; empty when not configured.
	User string
	// Password is its password. Load takes it from AdminPasswordEnv when
	// the file leaves it empty, so it need not be written in the file.
	Password string
}

// AdminPasswordEnv is the environment variable Load reads the admin
// password from when admin.password is empty.
const AdminPasswordEnv = "SLOTPROXY_ADMIN_PASSWORD"

// DefaultSlotsTable is the default SlotsTable.
const DefaultSlotsTable = "slotted_counters"

// RecordTypesTable is the fixed name of the record-type registry that
// migrate creates next to the slot table; SlotsTable cannot take it.
const RecordTypesTable = "slotproxy_record_types"

// Backend is the server side of the proxy.
type Backend struct {
	// Address is the backend's HOST:PORT.
	Address string
	// TLS is how the proxy secures its connection to the backend.
	TLS BackendTLS
	// ProxyProtocol sends a PROXY protocol v2 header with each client's
	// address when the proxy connects to the backend (MariaDB's
	// proxy_protocol_networks), so that host-based grants, USER() and the
	// process list see the client, not the proxy.
	ProxyProtocol bool
}

// TLSMode is how the proxy secures and verifies its backend connection. The
// names follow the MySQL client's --ssl-mode.
type TLSMode string

// The TLS modes, from weakest to strongest.
const (
	// TLSDisabled: plaintext.
	TLSDisabled TLSMode = "disabled"
	// TLSPreferred: TLS when the backend offers it (certificate not
	// checked), plaintext when it does not; the default, like the MySQL
	// client's ssl-mode=PREFERRED.
	TLSPreferred TLSMode = "preferred"
	// TLSRequired: encrypted, but the server's certificate is not checked,
	// so an active attacker can still intercept the connection.
	TLSRequired TLSMode = "required"
	// TLSVerifyCA: the server's certificate must chain to a trusted CA; its
	// name is not checked.
	TLSVerifyCA TLSMode = "verify-ca"
	// TLSVerifyIdentity: the certificate must chain to a trusted CA and name
	// the server (BackendTLS.ServerName, else the host of Backend.Address).
	TLSVerifyIdentity TLSMode = "verify-identity"
)

// tlsModes lists the legal TLSMode values, for error messages.
var tlsModes = []TLSMode{TLSDisabled, TLSPreferred, TLSRequired, TLSVerifyCA, TLSVerifyIdentity}

// BackendTLS configures TLS from the proxy to the backend.
type BackendTLS struct {
	// Mode is how the connection is secured; see TLSMode.
	Mode TLSMode
	// CA is a PEM bundle of CAs trusted by verify-ca and verify-identity.
	// Empty means the system roots. Setting it with Mode required is an
	// error (it would suggest a verification that does not happen).
	CA string
	// Cert and Key are an optional PEM client certificate and private key
	// presented to the backend. Both or neither.
	Cert, Key string
	// ServerName is the name verify-identity checks and the SNI sent in
	// every mode. Empty means the host part of Backend.Address.
	ServerName string
}

// ClientTLS configures TLS from clients to the proxy.
type ClientTLS struct {
	// Cert and Key are the PEM certificate chain and private key the proxy
	// presents. Both set: the proxy offers TLS; both empty: it does not.
	Cert, Key string
	// MinVersion is the lowest TLS version accepted from clients, one of
	// the crypto/tls Version constants (TLS 1.0 to 1.3).
	MinVersion uint16
	// Generate: with no Cert and Key, the proxy offers TLS with a
	// self-signed certificate it makes at start (as MySQL does with the
	// certificates it makes at initialization). False: without Cert and
	// Key, no TLS is offered.
	Generate bool
}

// Timeouts bound the phases of a connection and of shutdown. All are
// positive.
type Timeouts struct {
	// Connect bounds dialing the backend.
	Connect time.Duration
	// Handshake bounds a client's handshake, from greeting to authenticated.
	Handshake time.Duration
	// Shutdown is how long statements in flight may run after SIGTERM
	// before their connections are closed.
	Shutdown time.Duration
	// ClientWrite bounds how long a write to a client may make no progress
	// (a client that stopped reading) before its connection is closed.
	ClientWrite time.Duration
}

// Limits protect the proxy from connection floods.
type Limits struct {
	// MaxUnauthenticated caps connections in the handshake at once (each
	// holds a backend connection); further ones wait their turn within the
	// handshake timeout. Positive.
	MaxUnauthenticated int
	// MaxHandshakeQueue caps connections waiting for a handshake slot;
	// beyond it they get error 1040 at once. Positive.
	MaxHandshakeQueue int
	// MaxStatementBytes bounds the statements the proxy reads whole to
	// plan them; a larger one is relayed when it names no ruled table and
	// refused when it does. Positive.
	MaxStatementBytes int
	// MaxConcurrentRewrites bounds how many rewritten statements of
	// sessions outside transactions run at the backend at once; 0 means
	// no bound. Not negative.
	MaxConcurrentRewrites int
	// QueueWait: when no turn has been given back for this long (every
	// holder stuck), waiting statements run without one. Positive.
	QueueWait time.Duration
}

// LogFormat is the encoding of log records.
type LogFormat string

// The log formats.
const (
	LogText LogFormat = "text" // slog.TextHandler: key=value pairs
	LogJSON LogFormat = "json" // slog.JSONHandler: one JSON object per line
)

// Log configures logging.
type Log struct {
	// Level is the lowest level logged. SQL text is logged only at debug.
	Level slog.Level
	// Format is the record encoding.
	Format LogFormat
}

// Default returns the default configuration. Listen and Backend.Address are
// empty: there is no sensible default for them, so Validate rejects the
// result until they are set.
func Default() *Config {
	return &Config{
		Backend: Backend{TLS: BackendTLS{Mode: TLSPreferred}},
		TLS:     ClientTLS{MinVersion: tls.VersionTLS12, Generate: true},
		Timeouts: Timeouts{
			Connect:   5 * time.Second,
			Handshake: 10 * time.Second,
			Shutdown:  30 * time.Second,
			// The server's default wait_timeout, and the net_write_timeout
			// mysqldump sets for itself: longer than anything the server
			// itself would allow by default.
			ClientWrite: 8 * time.Hour,
		},
		Limits: Limits{MaxUnauthenticated: 64, MaxHandshakeQueue: 10000, MaxStatementBytes: 64 << 20,
			MaxConcurrentRewrites: 64, QueueWait: 2 * time.Second},
		Rollup:        Rollup{Enabled: true, Batch: 1000},
		Retries:       3,
		Coalesce:      true,
		Consolidate:   true,
		Log:           Log{Level: slog.LevelInfo, Format: LogText},
		SlotsTable:    DefaultSlotsTable,
		Metrics:       Metrics{Listen: DefaultMetricsListen},
		SlotPartition: SlotPartition{Count: Auto, Index: Auto},
	}
}

// Validate checks c the way Load checks a file (without line numbers) and
// also requires Listen and Backend.Address, which a file may leave to
// command-line flags. Call it after changing a loaded or default Config. It
// reads the TLS files named in c and checks that Rules is a directory.
func (c *Config) Validate() error {
	if c.Listen == "" {
		return &Error{Key: "listen", Err: errors.New("not set")}
	}
	if c.Backend.Address == "" {
		return &Error{Key: "backend.address", Err: errors.New("not set")}
	}
	return c.check(&source{})
}

// check verifies the values in c, reporting problems through s, which
// locates keys in the file being loaded (or nothing, for Validate). Empty
// Listen and Backend.Address pass: requiring them is Validate's job.
func (c *Config) check(s *source) error {
	if p := c.SlotPartition; p.Count != Auto && p.Count < 1 {
		return s.err("slot_partition.count", fmt.Errorf("%d: want auto or a number of parts, 1 or more", p.Count))
	}
	if p := c.SlotPartition; p.Index != Auto && (p.Index < 0 || p.Count != Auto && p.Index >= p.Count) {
		return s.err("slot_partition.index", fmt.Errorf("%d: want auto or a part from 0 to count - 1", p.Index))
	}
	if c.Listen != "" {
		if err := CheckAddress(c.Listen); err != nil {
			return s.err("listen", err)
		}
	}
	if c.Backend.Address != "" {
		if err := CheckAddress(c.Backend.Address); err != nil {
			return s.err("backend.address", err)
		}
	}
	if c.Metrics.Listen != "" {
		if err := CheckAddress(c.Metrics.Listen); err != nil {
			return s.err("metrics.listen", err)
		}
		if c.Metrics.Listen == c.Listen {
			return s.err("metrics.listen", fmt.Errorf("%q is also listen, where clients connect; choose another port", c.Metrics.Listen))
		}
	}
	if _, err := c.backendTLS(s); err != nil {
		return err
	}
	if _, err := c.clientTLS(s); err != nil {
		return err
	}
	for _, d := range []struct {
		key string
		val time.Duration
	}{
		{"timeouts.connect", c.Timeouts.Connect},
		{"timeouts.handshake", c.Timeouts.Handshake},
		{"timeouts.shutdown", c.Timeouts.Shutdown},
		{"timeouts.client_write", c.Timeouts.ClientWrite},
	} {
		if d.val <= 0 {
			return s.err(d.key, fmt.Errorf("must be positive, got %v", d.val))
		}
	}
	if c.Rollup.Interval < 0 {
		return s.err("rollup.interval", fmt.Errorf("must be positive or auto, got %v", c.Rollup.Interval))
	}
	if n := c.Rollup.Batch; n <= 0 {
		return s.err("rollup.batch", fmt.Errorf("must be positive, got %d", n))
	}
	if n := c.Retries; n < 0 || n > 100 {
		return s.err("retries", fmt.Errorf("must be between 0 and 100, got %d", n))
	}
	if n := c.Limits.MaxHandshakeQueue; n <= 0 {
		return s.err("limits.max_handshake_queue", fmt.Errorf("must be positive, got %d", n))
	}
	if n := c.Limits.MaxStatementBytes; n <= 0 {
		return s.err("limits.max_statement_bytes", fmt.Errorf("must be positive, got %d", n))
	}
	if n := c.Limits.MaxConcurrentRewrites; n < 0 {
		return s.err("limits.max_concurrent_rewrites", fmt.Errorf("must not be negative (0: no limit), got %d", n))
	}
	if d := c.Limits.QueueWait; d <= 0 {
		return s.err("limits.queue_wait", fmt.Errorf("must be positive, got %s", d))
	}
	if n := c.Limits.MaxUnauthenticated; n <= 0 {
		return s.err("limits.max_unauthenticated", fmt.Errorf("must be positive, got %d", n))
	}
	if f := c.Log.Format; f != LogText && f != LogJSON {
		return s.err("log.format", fmt.Errorf("unknown format %q (want %s, %s)", f, LogText, LogJSON))
	}
	if err := checkTableName(c.SlotsTable); err != nil {
		return s.err("slots_table", err)
	}
	if strings.EqualFold(c.SlotsTable, RecordTypesTable) {
		return s.err("slots_table", fmt.Errorf("%q is the name of the record-type registry; choose another", c.SlotsTable))
	}
	if c.Rules != "" {
		fi, err := os.Stat(c.Rules)
		switch {
		case err != nil:
			return s.err("rules", err)
		case !fi.IsDir():
			return s.err("rules", fmt.Errorf("%s is not a directory", c.Rules))
		}
		if c.Admin.User == "" {
			// Reported on the rules line: that is what needs the account.
			return s.errAt(s.lines["rules"], "admin.user", errors.New(
				"not set; with rules the proxy needs its own account on the backend (admin: {user, password})"))
		}
	}
	return nil
}

// checkTableName reports whether name is a table name MySQL accepts: 1 to
// 64 characters of valid UTF-8 in the Basic Multilingual Plane, none of
// them NUL, not ending in a space.
func checkTableName(name string) error {
	switch {
	case name == "":
		return errors.New("empty table name")
	case !utf8.ValidString(name):
		return fmt.Errorf("%q is not valid UTF-8", name)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%q contains a NUL character", name)
	case strings.HasSuffix(name, " "):
		return fmt.Errorf("%q ends with a space; MySQL does not allow that", name)
	}
	for _, r := range name {
		if r > 0xFFFF {
			return fmt.Errorf("%q contains %U, which MySQL does not allow in names", name, r)
		}
	}
	if n := utf8.RuneCountInString(name); n > 64 {
		return fmt.Errorf("%q is %d characters long; MySQL allows at most 64", name, n)
	}
	return nil
}

// CheckAddress reports whether addr is HOST:PORT with a decimal port from 1
// to 65535. HOST may be a name, an IP address (IPv6 in brackets) or empty.
func CheckAddress(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return fmt.Errorf("%q: %s (want HOST:PORT)", addr, ae.Err)
		}
		return fmt.Errorf("%q: %w", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("%q: port %q is not a number from 1 to 65535", addr, port)
	}
	return nil
}

// Logger returns a logger that writes records at Log.Level and above to w,
// encoded as Log.Format.
//
// An error attribute is written as its message: some libraries' errors
// (go-mysql's, through pingcap/errors) print their stack trace under the
// handlers' %+v, which does not belong in a log line.
func (c *Config) Logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.Log.Level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if err, ok := a.Value.Any().(error); ok && a.Value.Kind() == slog.KindAny {
			a.Value = slog.StringValue(err.Error())
		}
		return a
	}}
	if c.Log.Format == LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
