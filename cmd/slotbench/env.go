package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	myclient "github.com/go-mysql-org/go-mysql/client"
	"github.com/go-sql-driver/mysql"

	"github.com/slotproxy/slotproxy/internal/catalog"
	"github.com/slotproxy/slotproxy/internal/config"
	"github.com/slotproxy/slotproxy/internal/dialect"
	"github.com/slotproxy/slotproxy/internal/testdb"
	"github.com/slotproxy/slotproxy/proxy"
	"github.com/slotproxy/slotproxy/rewrite"
	"github.com/slotproxy/slotproxy/rules"
)

// schema is the benchmark's database: bench, or app for --demo (set once,
// by parseOptions, before anything else runs).
var schema = "bench"

// bench is one benchmark run: the backend, the servers in front of it and
// the report being filled in.
type bench struct {
	opts *options
	cons *console
	rep  *report

	db         *testdb.Server // nil with --backend
	backendPID int            // mariadbd's pid when we started it, for CPU accounting

	backendAddr          string
	user, password       string // the clients' account
	adminUser, adminPass string // slotproxy's admin account (catalog, checks)
	version              string // the backend's greeting version
	recordType           int    // of bench.repos.downloads
	rowAlias             bool

	admin *sql.DB // direct to the backend as admin, database bench

	srv       *proxy.Server
	proxyAddr string
	relay     *relay
	// rolledSrv serves the same rule with reads: rolled_up (counter-read's
	// slotproxy-rolled-up target); nil with --proxy.
	rolledSrv  *proxy.Server
	rolledAddr string
	// soloSrv serves the rule with coalescing off (coalesce: false), for
	// hot-autocommit's slotproxy-solo target.
	soloSrv  *proxy.Server
	soloAddr string

	// relayAddr is the plain relay's address: b.relay's, or relayChild's
	// with --slotproxy.
	relayAddr string
	// rw is the rewriter of the bench's rule (counter-read's
	// relay-rewritten target sends its SQL by hand).
	rw *rewrite.Rewriter

	// With --slotproxy (see processes.go): the serve processes, the
	// relay's child process, their directory, and the pid of the process
	// serving each target address (its CPU time is reported apart).
	served          []*served
	mainServed      *served
	servedRollupOff bool // the serve processes run with roll-up off (see rollupOff)
	relayChild      *child
	procDir         string
	pids            map[string]int

	profiled bool // the CPU profile has been taken
}

// setup starts or connects to the backend, creates and seeds the schema,
// migrates the slot tables and starts slotproxy and the relay.
func (b *bench) setup(ctx context.Context) error {
	o := b.opts
	t0 := time.Now()
	if o.backend == "" {
		b.cons.progress("starting the server (internal/testdb)...")
		s, err := testdb.Start(testdb.Options{ExtraArgs: o.mariadbdArgs, Flavor: testdb.Flavor(o.server)})
		if err != nil {
			return err
		}
		b.db = s
		if err := testdb.Setup(s); err != nil {
			return err
		}
		b.backendAddr = s.Addr
		b.user, b.password = testdb.User, testdb.Password
		b.adminUser, b.adminPass = s.RootUser, s.RootPassword
		b.rep.Env.Backend = "throwaway " + string(s.Flavor) + " (internal/testdb)"
		if data, err := os.ReadFile(filepath.Join(s.Dir, "mysqld.pid")); err == nil {
			b.backendPID, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		}
	} else {
		if _, _, err := net.SplitHostPort(o.backend); err != nil {
			return usageError{fmt.Errorf("--backend: %w", err)}
		}
		b.backendAddr = o.backend
		b.user, b.password = o.user, o.password
		b.adminUser, b.adminPass = o.adminUser, o.adminPass
		b.rep.Env.Backend = o.backend
	}
	if o.proxy != "" {
		return b.setupExternal(ctx, t0)
	}

	var err error
	if b.admin, err = openDB(b.backendAddr, b.adminUser, b.adminPass, "", 4); err != nil {
		return err
	}
	if err := b.admin.QueryRowContext(ctx, "SELECT VERSION()").Scan(&b.version); err != nil {
		return fmt.Errorf("connecting to backend %s: %w", b.backendAddr, err)
	}
	b.rep.Env.BackendVersion = b.version
	b.cons.progress(fmt.Sprintf("creating schema %s (%d repos, %d items)...", schema, o.rows, o.items))
	if err := b.createSchema(ctx); err != nil {
		return err
	}
	// From now on the admin pool works in bench.
	b.admin.Close()
	if b.admin, err = openDB(b.backendAddr, b.adminUser, b.adminPass, schema, 4); err != nil {
		return err
	}

	rw, err := b.loadRewriter(ctx, o.slots, true)
	if err != nil {
		return err
	}
	t := rw.Catalog().Tables()
	if len(t) != 1 || len(t[0].Counters) != 1 {
		return fmt.Errorf("catalog: want one ruled table with one counter, got %d tables", len(t))
	}
	b.recordType = t[0].Counters[0].RecordType
	b.rowAlias = dialect.Parse(b.version).UpsertRowAlias()
	b.rw = rw

	if o.slotproxyBin != "" {
		if err := b.startProcesses(ctx); err != nil {
			return err
		}
	} else if err := b.startInProcess(ctx, rw); err != nil {
		return err
	}

	// The proxy must answer, and rewrite counter reads.
	if err := b.checkRead(ctx, b.proxyAddr, 1, 0); err != nil {
		return fmt.Errorf("sanity check through slotproxy: %w", err)
	}
	b.cons.clear()
	where := "in this process"
	if o.slotproxyBin != "" {
		where = "as processes of their own"
	}
	b.cons.logf("slotbench: backend %s (%s), slotproxy %s, relay %s (%s), record type %d, setup %s",
		b.backendAddr, b.version, b.proxyAddr, b.relayAddr, where, b.recordType, time.Since(t0).Round(time.Millisecond))
	return nil
}

// startInProcess starts slotproxy's variants and the relay in this
// process (without --slotproxy).
func (b *bench) startInProcess(ctx context.Context, rw *rewrite.Rewriter) error {
	var err error
	t := rw.Catalog().Tables()
	logger := slog.New(slog.NewTextHandler(b.cons, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// As serve: coalescing and consolidation on, and folds in transactions read slot rows
	// as the admin account.
	if b.srv, b.proxyAddr, err = b.startProxy(ctx, proxy.Config{Backend: b.backendAddr, Rewriter: rw, Logger: logger, Coalesce: true, Consolidate: true}, true); err != nil {
		return err
	}
	// The same rule with reads: rolled_up, for counter-read.
	rolled := *t[0]
	rolled.RolledUp, rolled.MaxStaleness = true, rules.DefaultMaxStaleness
	if b.rolledSrv, b.rolledAddr, err = b.startProxy(ctx, proxy.Config{Backend: b.backendAddr, Logger: logger,
		Rewriter: catalog.NewRewriter(rewrite.NewCatalog([]*rewrite.Table{&rolled}, nil), b.version)}, false); err != nil {
		return err
	}
	// Coalescing and consolidation off, for hot-autocommit's and hot-read's
	// slotproxy-solo.
	if b.soloSrv, b.soloAddr, err = b.startProxy(ctx, proxy.Config{Backend: b.backendAddr, Rewriter: rw, Logger: logger}, true); err != nil {
		return err
	}
	pprof.Do(ctx, pprof.Labels("component", "relay"), func(context.Context) {
		b.relay, err = startRelay(b.backendAddr)
	})
	if err != nil {
		return err
	}
	b.relayAddr = b.relay.addr()
	return nil
}

// startProxy starts a proxy with cfg on a loopback port of its own, its
// folds reading slot rows as the admin account when slotReader is set.
// Goroutines inherit profiler labels from the goroutine that starts them,
// so every proxy goroutine carries component=slotproxy.
func (b *bench) startProxy(ctx context.Context, cfg proxy.Config, slotReader bool) (*proxy.Server, string, error) {
	srv, err := proxy.NewServer(cfg)
	if err != nil {
		return nil, "", err
	}
	if slotReader {
		srv.SetSlotReader(catalog.NewSlotReader(func(ctx context.Context) (*myclient.Conn, error) {
			return myclient.ConnectWithContext(ctx, b.backendAddr, b.adminUser, b.adminPass, "", time.Minute)
		}, 4))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return nil, "", err
	}
	pprof.Do(ctx, pprof.Labels("component", "slotproxy"), func(context.Context) {
		go srv.Serve(ln)
	})
	return srv, ln.Addr().String(), nil
}

// setupExternal is setup with --proxy: the schema, the rule's slot table
// and the proxy exist already; this only finds the record type and the
// rows of repos, and starts the relay. The backend and the proxy may still
// be starting (docker compose): connecting is retried for a minute.
func (b *bench) setupExternal(ctx context.Context, t0 time.Time) error {
	var err error
	if b.admin, err = openDB(b.backendAddr, b.adminUser, b.adminPass, schema, 4); err != nil {
		return err
	}
	b.cons.progress(fmt.Sprintf("waiting for the backend %s and slotproxy %s...", b.backendAddr, b.opts.proxy))
	var rows int
	for deadline := time.Now().Add(time.Minute); ; {
		err = b.admin.QueryRowContext(ctx, "SELECT VERSION()").Scan(&b.version)
		if err == nil {
			err = b.admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM repos").Scan(&rows)
		}
		if err == nil {
			var db *sql.DB
			if db, err = openDB(b.opts.proxy, b.user, b.password, schema, 1); err == nil {
				err = db.PingContext(ctx)
				db.Close()
			}
		}
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return fmt.Errorf("backend %s, slotproxy %s: %w", b.backendAddr, b.opts.proxy, err)
	}
	if rows < 2 {
		return fmt.Errorf("%s.repos has %d rows; want ids 1 to N, N >= 2", schema, rows)
	}
	b.opts.rows = rows
	b.rep.Env.BackendVersion = b.version
	rw, err := b.loadRewriter(ctx, b.opts.slots, false)
	if err != nil {
		return err
	}
	t := rw.Catalog().Tables()
	if len(t) != 1 || len(t[0].Counters) == 0 {
		return fmt.Errorf("catalog: want one ruled table, got %d", len(t))
	}
	b.recordType = t[0].Counters[0].RecordType
	b.rowAlias = dialect.Parse(b.version).UpsertRowAlias()
	b.proxyAddr = b.opts.proxy
	if b.relay, err = startRelay(b.backendAddr); err != nil {
		return err
	}
	b.relayAddr = b.relay.addr()
	b.rw = rw
	if err := b.checkRead(ctx, b.proxyAddr, 1, -1); err != nil {
		return fmt.Errorf("sanity check through slotproxy: %w", err)
	}
	b.cons.clear()
	b.cons.logf("slotbench: backend %s (%s), slotproxy %s (running), record type %d, setup %s",
		b.backendAddr, b.version, b.proxyAddr, b.recordType, time.Since(t0).Round(time.Millisecond))
	return nil
}

func (b *bench) close() {
	if b.srv != nil {
		b.srv.Close()
	}
	if b.soloSrv != nil {
		b.soloSrv.Close()
	}
	if b.rolledSrv != nil {
		b.rolledSrv.Close()
	}
	if b.relay != nil {
		b.relay.close()
	}
	b.stopProcesses()
	if b.admin != nil {
		b.admin.Close()
	}
	if b.db != nil {
		if err := b.db.Stop(); err != nil {
			b.cons.logf("slotbench: %v", err)
		}
	}
	b.cons.clear()
}

// openDB opens a pool of up to n connections with go-sql-driver: real
// server-side prepared statements (interpolateParams=false).
func openDB(addr, user, pass, db string, n int) (*sql.DB, error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = user, pass, "tcp", addr, db
	cfg.InterpolateParams = false
	cfg.Timeout = 10 * time.Second
	cfg.ReadTimeout = 2 * time.Minute
	cfg.WriteTimeout = 2 * time.Minute
	cfg.Logger = mysql.Logger(discardLogger{})
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	pool := sql.OpenDB(conn)
	pool.SetMaxOpenConns(n)
	pool.SetMaxIdleConns(n)
	pool.SetConnMaxLifetime(0)
	pool.SetConnMaxIdleTime(0)
	return pool, nil
}

// discardLogger silences the driver's "unexpected EOF" chatter; errors
// reach the benchmark as return values.
type discardLogger struct{}

func (discardLogger) Print(...any) {}

// execAll runs statements in order on one connection.
func execAll(ctx context.Context, db *sql.DB, stmts ...string) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}

// createSchema drops and re-creates schema bench with repos and items.
func (b *bench) createSchema(ctx context.Context) error {
	o := b.opts
	if err := execAll(ctx, b.admin,
		"DROP DATABASE IF EXISTS "+schema,
		"CREATE DATABASE "+schema,
		"CREATE TABLE "+schema+".repos (id BIGINT PRIMARY KEY, name VARCHAR(64), downloads BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB",
		"CREATE TABLE "+schema+".items (id BIGINT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL, KEY k (k)) ENGINE=InnoDB",
	); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const batch = 1000
	insert := func(table string, n int, row func(i int) string) error {
		var sb strings.Builder
		for lo := 1; lo <= n; lo += batch {
			sb.Reset()
			sb.WriteString("INSERT INTO " + schema + "." + table + " VALUES ")
			for i := lo; i < lo+batch && i <= n; i++ {
				if i > lo {
					sb.WriteByte(',')
				}
				sb.WriteString(row(i))
			}
			if _, err := b.admin.ExecContext(ctx, sb.String()); err != nil {
				return fmt.Errorf("seeding %s: %w", table, err)
			}
		}
		return nil
	}
	if err := insert("repos", o.rows, func(i int) string {
		return fmt.Sprintf("(%d,'repo-%d',0)", i, i)
	}); err != nil {
		return err
	}
	return insert("items", o.items, func(i int) string {
		return fmt.Sprintf("(%d,%d,'%s','%s')", i, rng.IntN(o.items)+1, randText(rng, 120), randText(rng, 60))
	})
}

// randText returns n random digits in groups, like sysbench's c and pad.
func randText(rng *rand.Rand, n int) string {
	buf := make([]byte, n)
	for i := range buf {
		if i%12 == 11 {
			buf[i] = '-'
		} else {
			buf[i] = byte('0' + rng.IntN(10))
		}
	}
	return string(buf)
}

// adminConfig is the slotproxy configuration the catalog needs.
func adminConfig(backend, user, pass string) *config.Config {
	cfg := config.Default()
	cfg.Backend.Address = backend
	cfg.Admin = config.Admin{User: user, Password: pass}
	return cfg
}

// ruleSet is the rule for repos: the rule file ruleFile when given (it must
// rule repos.downloads of the benchmark's schema), else one with slots
// slots.
func ruleSet(slots int, ruleFile string) (*rules.Set, error) {
	var r *rules.Rule
	var err error
	if ruleFile != "" {
		data, rerr := os.ReadFile(ruleFile)
		if rerr != nil {
			return nil, rerr
		}
		if r, err = rules.Parse(ruleFile, data); err != nil {
			return nil, err
		}
		if r.Schema != schema || r.Table != "repos" || !slices.ContainsFunc(r.Counters, func(c rules.Counter) bool { return c.Name == "downloads" }) {
			return nil, fmt.Errorf("%s: want a rule for %s.repos with counter downloads", ruleFile, schema)
		}
	} else if r, err = rules.Parse("slotbench/repos.yaml", []byte(builtinRule(slots))); err != nil {
		return nil, err
	}
	return rules.NewSet(r)
}

// builtinRule is the rule file of repos.downloads with slots slots.
func builtinRule(slots int) string {
	return fmt.Sprintf("table: %s.repos\nkey: id\ncounters: [downloads]\nslots: %d\n", schema, slots)
}

// buildRewriter loads the catalog of bench.repos with slots slots, first
// migrating (creating the slot tables and registering the record type) when
// migrate is set.
func buildRewriter(ctx context.Context, backend, user, pass string, slots int, ruleFile string, migrate bool) (*rewrite.Rewriter, error) {
	set, err := ruleSet(slots, ruleFile)
	if err != nil {
		return nil, err
	}
	cfg := adminConfig(backend, user, pass)
	conn, err := catalog.Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if migrate {
		if err := catalog.Migrate(ctx, conn, set, config.DefaultSlotsTable, io.Discard); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
	}
	cat, err := catalog.Load(ctx, conn, set, config.DefaultSlotsTable)
	if err != nil {
		return nil, fmt.Errorf("loading the catalog: %w", err)
	}
	return catalog.NewRewriter(cat, conn.GetServerVersion()), nil
}

func (b *bench) loadRewriter(ctx context.Context, slots int, migrate bool) (*rewrite.Rewriter, error) {
	return buildRewriter(ctx, b.backendAddr, b.adminUser, b.adminPass, slots, b.opts.ruleFile, migrate)
}

// total returns the true value of repos id's downloads: base + slots, read
// directly from the backend.
func (b *bench) total(ctx context.Context, id int64) (int64, error) {
	var v int64
	err := b.admin.QueryRowContext(ctx, fmt.Sprintf(
		"SELECT r.downloads + COALESCE((SELECT SUM(s.count) FROM %s s WHERE s.record_type = %d AND s.record_id = r.id), 0) FROM repos r WHERE r.id = ?",
		config.DefaultSlotsTable, b.recordType), id).Scan(&v)
	return v, err
}

// checkRead reads repos id's downloads through addr (a prepared statement
// and a text query) and compares with want (want < 0: with the true total).
func (b *bench) checkRead(ctx context.Context, addr string, id int64, want int64) error {
	if want < 0 {
		var err error
		if want, err = b.total(ctx, id); err != nil {
			return err
		}
	}
	db, err := openDB(addr, b.user, b.password, schema, 1)
	if err != nil {
		return err
	}
	defer db.Close()
	var prepared, text int64
	if err := db.QueryRowContext(ctx, "SELECT downloads FROM repos WHERE id = ?", id).Scan(&prepared); err != nil {
		return err
	}
	if err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT downloads FROM repos WHERE id = %d", id)).Scan(&text); err != nil {
		return err
	}
	if prepared != want || text != want {
		return fmt.Errorf("repos id %d: downloads read as %d (prepared) and %d (text), want %d", id, prepared, text, want)
	}
	return nil
}

// seedCounterSlots gives each counter-read id n live slot rows of count 1
// (and removes other slot rows of those ids), so their total is n.
func (b *bench) seedCounterSlots(ctx context.Context, n int) error {
	lo, hi := b.counterIDRange()
	if _, err := b.admin.ExecContext(ctx, fmt.Sprintf("DELETE FROM %s WHERE record_type = %d AND record_id BETWEEN %d AND %d",
		config.DefaultSlotsTable, b.recordType, lo, hi)); err != nil {
		return err
	}
	var sb strings.Builder
	rows := 0
	flush := func() error {
		if rows == 0 {
			return nil
		}
		_, err := b.admin.ExecContext(ctx, sb.String())
		sb.Reset()
		rows = 0
		return err
	}
	for id := lo; id <= hi; id++ {
		for slot := range n {
			if rows == 0 {
				fmt.Fprintf(&sb, "INSERT INTO %s (record_type, record_id, slot, count) VALUES ", config.DefaultSlotsTable)
			} else {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, "(%d,%d,%d,1)", b.recordType, id, slot)
			if rows++; rows == 1000 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if err := b.checkRead(ctx, b.proxyAddr, lo, int64(n)); err != nil {
		return fmt.Errorf("counter-read setup: through slotproxy: %w", err)
	}
	return b.checkRead(ctx, b.relayAddr, lo, 0)
}

// counterIDRange is the ids counter-read reads: the last --counter-ids of
// repos, which nothing else writes.
func (b *bench) counterIDRange() (lo, hi int64) {
	return int64(b.opts.rows - b.opts.counterIDs + 1), int64(b.opts.rows)
}

// foldSlots moves repos id's slot rows into its base column in one
// transaction (as roll-up does), so that it keeps its total and has no
// slot rows left.
func (b *bench) foldSlots(ctx context.Context, id int64) error {
	tx, err := b.admin.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	where := fmt.Sprintf("record_type = %d AND record_id = %d", b.recordType, id)
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(
		"UPDATE repos SET downloads = downloads + COALESCE((SELECT SUM(count) FROM %s WHERE %s), 0) WHERE id = %d",
		config.DefaultSlotsTable, where, id)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("DELETE FROM %s WHERE %s", config.DefaultSlotsTable, where)); err != nil {
		return err
	}
	return tx.Commit()
}

// retryable reports whether an application would retry the transaction
// that failed with err: a deadlock or a lock wait timeout.
func retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}
