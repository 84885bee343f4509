package catalog

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/slotproxy/slotproxy/internal/config"
)

// Connect opens a connection to cfg's backend as the admin account
// (cfg.Admin), over TLS when cfg.Backend.TLS asks for it. Dialing is bounded
// by cfg.Timeouts.Connect and the whole of connecting and authenticating by
// cfg.Timeouts.Connect + cfg.Timeouts.Handshake, as well as by ctx. The
// connection's character set is utf8mb4. Errors name the backend and the
// account, and say when the admin account is not configured or its password
// is empty.
func Connect(ctx context.Context, cfg *config.Config) (*client.Conn, error) {
	addr := cfg.Backend.Address
	if cfg.Admin.User == "" {
		return nil, fmt.Errorf("backend %s: no admin account configured: set admin.user (and admin.password or %s); "+
			"the proxy needs its own account to create and load the slot tables", addr, config.AdminPasswordEnv)
	}
	tlsConfig, err := cfg.BackendTLSConfig()
	if err != nil {
		return nil, err
	}
	fail := func(err error) error {
		// go-mysql prefixes the server's error with where it noticed it
		// ("handleAuthResult: readAuthResult: "); the server's says it all.
		var myErr *mysql.MyError
		if errors.As(err, &myErr) {
			err = myErr
		}
		msg := fmt.Sprintf("connecting to backend %s as admin user %q: %v", addr, cfg.Admin.User, err)
		if cfg.Admin.Password == "" {
			msg += fmt.Sprintf(" (admin.password is empty and %s is not set)", config.AdminPasswordEnv)
		}
		return errors.New(msg)
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.Timeouts.Connect+cfg.Timeouts.Handshake)
	defer cancel()
	// go-mysql bounds only the dial by ctx; abort the handshake too by
	// expiring the connection's deadline once ctx is done.
	var stop func() bool
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		d := net.Dialer{Timeout: cfg.Timeouts.Connect}
		nc, err := d.DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		stop = context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
		return nc, nil
	}
	var opts []client.Option
	if tlsConfig != nil {
		opts = append(opts, func(c *client.Conn) error {
			c.SetTLSConfig(tlsConfig)
			return nil
		})
	}
	conn, err := client.ConnectWithDialer(ctx, "tcp", addr, cfg.Admin.User, cfg.Admin.Password, "", dial, opts...)
	if err != nil && cfg.BackendTLSPreferred() && strings.Contains(err.Error(), "does not support TLS") {
		// Mode preferred and a backend without TLS: plaintext. (go-mysql
		// decides before it sees the greeting.)
		if stop != nil {
			stop()
		}
		conn, err = client.ConnectWithDialer(ctx, "tcp", addr, cfg.Admin.User, cfg.Admin.Password, "", dial)
	}
	if stop != nil && !stop() {
		// ctx ended while connecting: the deadline may have broken the
		// connection even if the handshake got through.
		if err == nil {
			conn.Close()
		}
		return nil, fail(fmt.Errorf("timed out or cancelled: %w", context.Cause(ctx)))
	}
	if err != nil {
		return nil, fail(err)
	}
	if _, err := exec(context.Background(), conn, "SET NAMES utf8mb4"); err != nil {
		conn.Close()
		return nil, fail(err)
	}
	return conn, nil
}

// exec runs query with args (as a prepared statement when there are any) and
// returns its result set as strings (NULL as ""). ctx bounds it: once ctx is
// done the connection's deadline expires, which breaks the connection, so a
// caller that sees ctx's error should close conn.
func exec(ctx context.Context, conn *client.Conn, query string, args ...any) ([][]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	res, err := conn.Execute(query, args...)
	if !stop() {
		if err == nil {
			res.Close()
		}
		return nil, fmt.Errorf("%s: %w", firstLine(query), context.Cause(ctx))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", firstLine(query), err)
	}
	defer res.Close()
	return strings2D(res)
}

// strings2D copies a result set out as strings. The copies matter: go-mysql
// hands out strings that alias its buffers, which Close recycles.
func strings2D(res *mysql.Result) ([][]string, error) {
	if res.Resultset == nil {
		return nil, nil
	}
	out := make([][]string, res.RowNumber())
	for i := range out {
		row := make([]string, res.ColumnNumber())
		for j := range row {
			s, err := res.GetString(i, j)
			if err != nil {
				return nil, err
			}
			row[j] = strings.Clone(s)
		}
		out[i] = row
	}
	return out, nil
}

// firstLine shortens a statement for an error message.
func firstLine(query string) string {
	query, _, _ = strings.Cut(strings.TrimSpace(query), "\n")
	return query
}
