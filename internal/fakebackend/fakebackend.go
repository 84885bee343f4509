// Package fakebackend is an in-process MySQL server for tests, built on
// github.com/go-mysql-org/go-mysql/server.
//
// It exists for authentication paths that the MariaDB used elsewhere in the
// test suite cannot serve, chiefly caching_sha2_password with its three
// variants:
//
//   - fast auth: the server holds a cached SHA256(SHA256(password)) for the
//     user and accepts the scramble sent in the handshake response;
//   - full auth over TLS: the client sends the password in clear text inside
//     the TLS session;
//   - full auth without TLS: the client encrypts the password with the
//     server's RSA public key, which it either already has or requests by
//     sending the single byte 0x02.
//
// Which path each login took is recorded (see [Backend.Stats] and
// [Backend.Events]) so tests can assert on it, and [Backend.ClearAuthCache]
// forces the next login back to full auth, as a server restart would.
//
// After authentication the server answers only a handful of queries (see
// [Backend] for the list); it is a handshake fixture, not a database.
package fakebackend

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"
)

// DefaultVersion is the server version announced when Options.Version is
// empty.
const DefaultVersion = "8.4.0"

// Options configures a Backend. The zero value is usable but has no users.
type Options struct {
	// AuthPlugin is the server's default authentication plugin: it is
	// announced in the initial handshake and used for every user without an
	// entry in UserAuthPlugin. Empty means mysql.AUTH_CACHING_SHA2_PASSWORD.
	// Supported: mysql.AUTH_CACHING_SHA2_PASSWORD, mysql.AUTH_NATIVE_PASSWORD,
	// mysql.AUTH_SHA256_PASSWORD, mysql.AUTH_CLEAR_PASSWORD.
	AuthPlugin string

	// Users maps user name to password. An empty password allows login
	// without one. The map is copied by Start.
	Users map[string]string

	// UserAuthPlugin optionally overrides AuthPlugin per user. A client that
	// starts with the announced plugin is sent an AuthSwitchRequest for
	// such users. The map is copied by Start.
	UserAuthPlugin map[string]string

	// Databases, when non-nil, is the set of schema names COM_INIT_DB (and a
	// schema in the handshake response) accepts; others fail with
	// ER_BAD_DB_ERROR (1049). Nil accepts every name.
	Databases []string

	// TLS, when non-nil, makes the server advertise CLIENT_SSL and accept
	// the SSLRequest upgrade with this configuration (it is cloned by
	// Start). TLS stays optional for clients. Nil: no TLS is offered.
	TLS *tls.Config

	// RSAKey is the key pair used for the caching_sha2_password and
	// sha256_password public-key exchange on non-TLS connections. Nil
	// selects a 2048-bit key generated once per process and shared by all
	// Backends that do not set one.
	RSAKey *rsa.PrivateKey

	// Version is the server version string announced in the handshake.
	// Empty means DefaultVersion.
	Version string
}

// Backend is a running fake MySQL server listening on 127.0.0.1.
//
// After a successful login each connection answers:
//
//   - COM_PING, COM_RESET_CONNECTION and COM_SET_OPTION with OK/EOF;
//   - COM_INIT_DB with OK (subject to Options.Databases);
//   - COM_QUERY, and COM_STMT_PREPARE/EXECUTE without parameters, for
//     exactly these statements (case-insensitive, optional trailing ';'),
//     each returning one row with one column named after the expression:
//     SELECT 1, SELECT CURRENT_USER() ("user@%"), SELECT USER() and
//     SESSION_USER() ("user@client-ip"), SELECT VERSION() / @@version,
//     SELECT DATABASE() (NULL until a schema is selected) and
//     SELECT CONNECTION_ID();
//   - anything else with an ERR packet (ER_NOT_SUPPORTED_YET, 1235, for
//     queries; ER_UNKNOWN_COM_ERROR, 1047, for commands).
//
// All methods are safe for concurrent use.
type Backend struct {
	ln        net.Listener
	version   string
	plugin    string
	users     map[string]server.Credential
	databases map[string]bool // nil: any
	tlsConfig *tls.Config
	rsaKey    *rsa.PrivateKey
	auth      *authObserver

	// srv is replaced wholesale by ClearAuthCache; a connection keeps the
	// *server.Server it was accepted with.
	srv atomic.Pointer[server.Server]

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup

	accepted atomic.Int64
	queries  atomic.Int64
}

var sharedRSAKey = sync.OnceValues(func() (*rsa.PrivateKey, error) {
	return rsa.GenerateKey(rand.Reader, 2048)
})

// Start validates opts, listens on 127.0.0.1 with an ephemeral port and
// serves connections in the background until Close.
func Start(opts Options) (*Backend, error) {
	b := &Backend{
		version: opts.Version,
		plugin:  opts.AuthPlugin,
		users:   make(map[string]server.Credential, len(opts.Users)),
		rsaKey:  opts.RSAKey,
		conns:   make(map[net.Conn]struct{}),
	}
	if b.version == "" {
		b.version = DefaultVersion
	}
	if b.plugin == "" {
		b.plugin = mysql.AUTH_CACHING_SHA2_PASSWORD
	}
	b.auth = newAuthObserver()
	if !b.auth.Validate(b.plugin) {
		return nil, fmt.Errorf("fakebackend: unsupported auth plugin %q", b.plugin)
	}
	for user := range opts.UserAuthPlugin {
		if _, ok := opts.Users[user]; !ok {
			return nil, fmt.Errorf("fakebackend: UserAuthPlugin names unknown user %q", user)
		}
	}
	for user, password := range opts.Users {
		plugin := b.plugin
		if p, ok := opts.UserAuthPlugin[user]; ok {
			plugin = p
		}
		if !b.auth.Validate(plugin) {
			return nil, fmt.Errorf("fakebackend: user %q: unsupported auth plugin %q", user, plugin)
		}
		b.users[user] = server.Credential{Passwords: []string{password}, AuthPluginName: plugin}
	}
	if opts.Databases != nil {
		b.databases = make(map[string]bool, len(opts.Databases))
		for _, db := range opts.Databases {
			b.databases[db] = true
		}
	}
	if opts.TLS != nil {
		b.tlsConfig = opts.TLS.Clone()
	}
	if b.rsaKey == nil {
		key, err := sharedRSAKey()
		if err != nil {
			return nil, fmt.Errorf("fakebackend: generate RSA key: %w", err)
		}
		b.rsaKey = key
	}
	b.srv.Store(b.newServer())

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fakebackend: listen: %w", err)
	}
	b.ln = ln
	b.wg.Add(1)
	go b.acceptLoop()
	return b, nil
}

// newServer builds a go-mysql server configuration with an empty
// caching_sha2_password cache.
func (b *Backend) newServer() *server.Server {
	// The plugin was validated in Start, so this cannot panic.
	return server.NewServerWithAuth(b.version, mysql.DEFAULT_COLLATION_ID, b.plugin, b.rsaKey, b.tlsConfig, b.auth)
}

// Addr returns the listening address as "127.0.0.1:port".
func (b *Backend) Addr() string {
	return b.ln.Addr().String()
}

// RSAPublicKey returns the public half of the key used for the non-TLS
// password exchange, e.g. for go-sql-driver's mysql.RegisterServerPubKey.
func (b *Backend) RSAPublicKey() *rsa.PublicKey {
	return &b.rsaKey.PublicKey
}

// RSAPublicKeyPEM returns RSAPublicKey as a PKIX "PUBLIC KEY" PEM block,
// the format the server sends on request and that MySQL clients accept for
// --server-public-key-path.
func (b *Backend) RSAPublicKeyPEM() []byte {
	der, err := x509.MarshalPKIXPublicKey(&b.rsaKey.PublicKey)
	if err != nil {
		// An in-memory *rsa.PublicKey always marshals.
		panic(fmt.Sprintf("fakebackend: marshal RSA public key: %v", err))
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// ClearAuthCache forgets every cached caching_sha2_password verifier, as a
// server restart does, so that the next caching_sha2_password login of any
// user performs full authentication. Connections already past the
// handshake are unaffected; a handshake in progress may still populate the
// discarded cache, never the new one.
func (b *Backend) ClearAuthCache() {
	b.srv.Store(b.newServer())
}

// Conns returns the number of client connections currently open on the
// server side, including those still in the handshake. A connection is
// counted until its serving goroutine has finished, which happens shortly
// after the client disconnects; see WaitConns.
func (b *Backend) Conns() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.conns)
}

// WaitConns blocks until Conns() == n or ctx is done, returning ctx's error
// in the latter case.
func (b *Backend) WaitConns(ctx context.Context, n int) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		got := b.Conns()
		if got == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fakebackend: waiting for %d connections (have %d): %w", n, got, ctx.Err())
		case <-t.C:
		}
	}
}

// Close stops accepting, closes every open connection and waits until all
// goroutines started by the Backend have returned. It returns the error of
// closing the listener, if any. Calling Close again returns nil.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.wg.Wait()
		return nil
	}
	b.closed = true
	conns := make([]net.Conn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	b.mu.Unlock()

	err := b.ln.Close()
	// Closing the raw connection unblocks the serving goroutine, which
	// then tears down go-mysql's Conn itself (Conn.Close is not safe to
	// call concurrently with HandleCommand).
	for _, c := range conns {
		_ = c.Close()
	}
	b.wg.Wait()
	if err != nil {
		return fmt.Errorf("fakebackend: close listener: %w", err)
	}
	return nil
}

func (b *Backend) acceptLoop() {
	defer b.wg.Done()
	for {
		raw, err := b.ln.Accept()
		if err != nil {
			// Closed by Close, or broken: either way nothing more to serve.
			return
		}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			_ = raw.Close()
			return
		}
		b.conns[raw] = struct{}{}
		b.wg.Add(1)
		b.mu.Unlock()
		b.accepted.Add(1)
		go b.serve(raw)
	}
}

// serve runs one connection: handshake, then commands until the client
// quits or the connection breaks.
func (b *Backend) serve(raw net.Conn) {
	defer b.wg.Done()
	defer func() {
		_ = raw.Close()
		b.mu.Lock()
		delete(b.conns, raw)
		b.mu.Unlock()
	}()

	sess := &session{b: b, clientHost: hostOf(raw.RemoteAddr())}
	conn, err := b.srv.Load().NewCustomizedConn(raw, credentials{b}, sess)
	if err != nil {
		// go-mysql has already sent the ERR packet (if it could) and
		// closed the connection; the failure is counted by credentials.
		return
	}
	sess.user = conn.GetUser()
	sess.connID = conn.ConnectionID()
	for {
		if err := conn.HandleCommand(); err != nil {
			return
		}
	}
}

func hostOf(addr net.Addr) string {
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host
}

// credentials is the go-mysql AuthenticationHandler of a Backend.
type credentials struct{ b *Backend }

// GetCredential returns the configured credential. Unknown users get a
// credential with an unguessable password in the default plugin, so they
// go through the normal exchange and fail with ER_ACCESS_DENIED_ERROR
// (1045) like on a real server, instead of go-mysql's ER_NO_SUCH_USER.
func (c credentials) GetCredential(username string) (server.Credential, bool, error) {
	if cred, ok := c.b.users[username]; ok {
		return cred, true, nil
	}
	buf := make([]byte, 32)
	_, _ = rand.Read(buf) // never fails (crypto/rand contract)
	return server.Credential{
		Passwords:      []string{"unknown-user-" + hex.EncodeToString(buf)},
		AuthPluginName: c.b.plugin,
	}, true, nil
}

// OnAuthSuccess counts the login.
func (c credentials) OnAuthSuccess(*server.Conn) error {
	c.b.auth.logins.Add(1)
	return nil
}

// OnAuthFailure counts the failed login.
func (c credentials) OnAuthFailure(*server.Conn, error) {
	c.b.auth.failures.Add(1)
}
