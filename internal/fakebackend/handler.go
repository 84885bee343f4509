package fakebackend

import (
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// session is the go-mysql server.Handler of one connection. go-mysql calls
// it only from the connection's goroutine, so it needs no locking.
type session struct {
	b          *Backend
	clientHost string
	user       string // set once the handshake has succeeded
	connID     uint32 // ditto
	db         string
}

// UseDB handles COM_INIT_DB. Note that go-mysql also calls it for a schema
// named in the handshake response, before the password is checked.
func (s *session) UseDB(db string) error {
	if s.b.databases != nil && !s.b.databases[db] {
		return mysql.NewDefaultError(mysql.ER_BAD_DB_ERROR, db)
	}
	s.db = db
	return nil
}

// HandleQuery handles COM_QUERY.
func (s *session) HandleQuery(query string) (*mysql.Result, error) {
	s.b.queries.Add(1)
	return s.answer(query, false)
}

// HandleFieldList rejects the deprecated COM_FIELD_LIST.
func (s *session) HandleFieldList(table, _ string) ([]*mysql.Field, error) {
	return nil, mysql.NewError(mysql.ER_NOT_SUPPORTED_YET, fmt.Sprintf("fakebackend: COM_FIELD_LIST %q not supported", table))
}

// HandleStmtPrepare accepts the statements HandleQuery answers, with no
// parameters and one result column.
func (s *session) HandleStmtPrepare(query string) (params, columns int, ctx any, err error) {
	if _, err := s.answer(query, true); err != nil {
		return 0, 0, nil, err
	}
	return 0, 1, nil, nil
}

// HandleStmtExecute answers a statement accepted by HandleStmtPrepare with
// a binary-protocol result set.
func (s *session) HandleStmtExecute(_ any, query string, _ []any) (*mysql.Result, error) {
	return s.answer(query, true)
}

// HandleStmtClose has nothing to release.
func (s *session) HandleStmtClose(any) error { return nil }

// HandleOtherCommand acknowledges COM_SET_OPTION (go-mysql then sends EOF)
// and COM_RESET_CONNECTION (OK), and rejects everything else.
func (s *session) HandleOtherCommand(cmd byte, _ []byte) error {
	switch cmd {
	case mysql.COM_SET_OPTION, mysql.COM_RESET_CONNECTION:
		return nil
	default:
		return mysql.NewDefaultError(mysql.ER_UNKNOWN_COM_ERROR)
	}
}

// answer builds the one-row result of a supported SELECT, in the binary
// protocol if binary is set.
func (s *session) answer(query string, binary bool) (*mysql.Result, error) {
	expr, ok := selectExpr(query)
	if !ok {
		return nil, unsupported(query)
	}
	var value any
	switch strings.ToLower(expr) {
	case "1":
		value = int64(1)
	case "current_user()":
		value = s.user + "@%"
	case "user()", "session_user()":
		value = s.user + "@" + s.clientHost
	case "version()", "@@version":
		value = s.b.version
	case "database()":
		if s.db != "" {
			value = s.db
		}
	case "connection_id()":
		value = int64(s.connID)
	default:
		return nil, unsupported(query)
	}
	rs, err := mysql.BuildSimpleResultset([]string{expr}, [][]any{{value}}, binary)
	if err != nil {
		return nil, fmt.Errorf("fakebackend: build result for %q: %w", query, err)
	}
	return mysql.NewResult(rs), nil
}

// selectExpr returns the select-list of "SELECT <expr>[;]", trimmed.
func selectExpr(query string) (string, bool) {
	q := strings.TrimSpace(query)
	q = strings.TrimSpace(strings.TrimSuffix(q, ";"))
	const kw = "select"
	if len(q) <= len(kw) || !strings.EqualFold(q[:len(kw)], kw) {
		return "", false
	}
	rest := q[len(kw):]
	if rest[0] != ' ' && rest[0] != '\t' && rest[0] != '\n' && rest[0] != '\r' {
		return "", false
	}
	return strings.TrimSpace(rest), true
}

func unsupported(query string) error {
	return mysql.NewError(mysql.ER_NOT_SUPPORTED_YET, fmt.Sprintf("fakebackend: unsupported statement %q", query))
}
