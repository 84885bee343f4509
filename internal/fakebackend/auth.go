package fakebackend

import (
	"crypto/tls"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"
)

// AuthPath says how the server verified a password.
type AuthPath int

const (
	// PathUnknown: the exchange ended before the path was determined.
	PathUnknown AuthPath = iota
	// PathFast: caching_sha2_password fast auth; the scramble from the
	// handshake response matched the cached verifier.
	PathFast
	// PathFullTLS: caching_sha2_password full auth with the password sent
	// in clear text over TLS.
	PathFullTLS
	// PathFullRSA: caching_sha2_password full auth with the password
	// RSA-encrypted on a non-TLS connection.
	PathFullRSA
	// PathEmptyPassword: caching_sha2_password with an empty password,
	// which needs neither fast nor full auth.
	PathEmptyPassword
	// PathNative: mysql_native_password.
	PathNative
	// PathOther: any other plugin (sha256_password, mysql_clear_password).
	PathOther
)

func (p AuthPath) String() string {
	switch p {
	case PathFast:
		return "fast"
	case PathFullTLS:
		return "full-tls"
	case PathFullRSA:
		return "full-rsa"
	case PathEmptyPassword:
		return "empty-password"
	case PathNative:
		return "native"
	case PathOther:
		return "other"
	default:
		return "unknown"
	}
}

// AuthEvent records one password verification by the server.
type AuthEvent struct {
	// User is the user name the client logged in as.
	User string
	// Plugin is the plugin the password was verified with (after any
	// AuthSwitchRequest).
	Plugin string
	// Path is how the password was verified. For failed attempts it is how
	// far the exchange got: a wrong caching_sha2_password is only rejected
	// after full auth, so its Path is PathFullTLS or PathFullRSA.
	Path AuthPath
	// PublicKeyRequested reports that the client asked for the server's RSA
	// public key (caching_sha2_password request byte 0x02) and was sent it.
	PublicKeyRequested bool
	// TLS reports whether the connection was using TLS at the time.
	TLS bool
	// Err is nil if the password was accepted, otherwise the reason it was
	// not (go-mysql's server.ErrAccessDenied for a wrong password).
	Err error
}

// Stats is a snapshot of a Backend's counters. Counters only grow, except
// Active; compare snapshots taken before and after the step under test.
type Stats struct {
	Accepted int64 // TCP connections accepted
	Active   int   // connections currently open (see Backend.Conns)

	Logins        int64 // handshakes that ended with OK
	LoginFailures int64 // handshakes that failed after the client answered the server greeting (TLS, password, schema, ...)

	FastAuths         int64 // successful caching_sha2_password fast auths
	FullAuths         int64 // successful caching_sha2_password full auths, TLS or RSA
	FullAuthsTLS      int64 // subset of FullAuths with the password sent over TLS
	FullAuthsRSA      int64 // subset of FullAuths with an RSA-encrypted password
	PublicKeyRequests int64 // RSA public keys sent to clients on request
	NativeAuths       int64 // successful mysql_native_password auths

	Queries int64 // COM_QUERY packets received
}

// Stats returns a snapshot of the counters.
func (b *Backend) Stats() Stats {
	a := b.auth
	return Stats{
		Accepted:          b.accepted.Load(),
		Active:            b.Conns(),
		Logins:            a.logins.Load(),
		LoginFailures:     a.failures.Load(),
		FastAuths:         a.fast.Load(),
		FullAuths:         a.fullTLS.Load() + a.fullRSA.Load(),
		FullAuthsTLS:      a.fullTLS.Load(),
		FullAuthsRSA:      a.fullRSA.Load(),
		PublicKeyRequests: a.pubKeyRequests.Load(),
		NativeAuths:       a.native.Load(),
		Queries:           b.queries.Load(),
	}
}

// Events returns every password verification so far, oldest first. The
// slice is a copy.
func (b *Backend) Events() []AuthEvent {
	b.auth.mu.Lock()
	defer b.auth.mu.Unlock()
	return slices.Clone(b.auth.events)
}

// authObserver is the go-mysql AuthenticationProvider of a Backend. It
// delegates all protocol work to server.DefaultAuthenticationProvider and
// only watches the calls to learn which path a login took.
//
// The observation relies on how go-mysql drives caching_sha2_password:
// Authenticate is first called with the scramble from the handshake
// response (or AuthSwitchResponse). On a cache hit it answers "fast auth
// success" and returns. Otherwise it answers "perform full authentication",
// reads the client's next packet and calls Authenticate again, re-entrantly
// and on the same goroutine, with that packet: the clear-text password
// (TLS), the public-key request 0x02, or the RSA-encrypted password. So a
// nested call for a connection means full auth, and its payload tells
// which variant.
type authObserver struct {
	inner server.DefaultAuthenticationProvider

	mu       sync.Mutex
	inflight map[*server.Conn]*authTrace
	events   []AuthEvent

	logins, failures               atomic.Int64
	fast, fullTLS, fullRSA, native atomic.Int64
	pubKeyRequests                 atomic.Int64
}

// authTrace is what the outermost Authenticate call of a connection learns
// from the nested ones.
type authTrace struct {
	nested        bool
	tls           bool
	pubKeyRequest bool
}

// cachingSha2RequestPublicKey is the byte a client sends, after the server
// asked for full authentication on a non-TLS connection, to request the
// server's RSA public key.
const cachingSha2RequestPublicKey = 0x02

func newAuthObserver() *authObserver {
	return &authObserver{inflight: make(map[*server.Conn]*authTrace)}
}

// Validate implements server.AuthenticationProvider.
func (a *authObserver) Validate(plugin string) bool {
	return a.inner.Validate(plugin)
}

// Authenticate implements server.AuthenticationProvider.
func (a *authObserver) Authenticate(c *server.Conn, plugin string, data []byte) error {
	a.mu.Lock()
	tr, nested := a.inflight[c]
	if !nested {
		tr = &authTrace{}
		a.inflight[c] = tr
	}
	a.mu.Unlock()

	if nested {
		tr.nested = true
		tr.tls = isTLS(c)
		if plugin == mysql.AUTH_CACHING_SHA2_PASSWORD && !tr.tls && len(data) == 1 && data[0] == cachingSha2RequestPublicKey {
			tr.pubKeyRequest = true
			a.pubKeyRequests.Add(1)
		}
		return a.inner.Authenticate(c, plugin, data)
	}

	err := a.inner.Authenticate(c, plugin, data)

	ev := AuthEvent{
		User:               c.GetUser(),
		Plugin:             plugin,
		PublicKeyRequested: tr.pubKeyRequest,
		TLS:                isTLS(c),
		Err:                err,
	}
	switch plugin {
	case mysql.AUTH_CACHING_SHA2_PASSWORD:
		switch {
		case tr.nested && tr.tls:
			ev.Path = PathFullTLS
		case tr.nested:
			ev.Path = PathFullRSA
		case len(data) == 0 || (len(data) == 1 && data[0] == 0):
			ev.Path = PathEmptyPassword
		case err == nil:
			ev.Path = PathFast
		}
	case mysql.AUTH_NATIVE_PASSWORD:
		ev.Path = PathNative
	default:
		ev.Path = PathOther
	}
	if err == nil {
		switch ev.Path {
		case PathFast:
			a.fast.Add(1)
		case PathFullTLS:
			a.fullTLS.Add(1)
		case PathFullRSA:
			a.fullRSA.Add(1)
		case PathNative:
			a.native.Add(1)
		}
	}

	a.mu.Lock()
	delete(a.inflight, c)
	a.events = append(a.events, ev)
	a.mu.Unlock()

	// Returned unwrapped: go-mysql maps errors to ERR packets by identity
	// (errors.Is(err, server.ErrAccessDenied), err.(*mysql.MyError)).
	return err
}

// isTLS reports whether go-mysql has upgraded c's transport to TLS. Only
// call it from c's own goroutine: go-mysql swaps the field unsynchronized.
func isTLS(c *server.Conn) bool {
	_, ok := c.Conn.Conn.(*tls.Conn)
	return ok
}
