// Runs testdata/scenario.tsv, or a batch workload, with MariaDB Connector/J
// 2.x and prints a canonical transcript of what the driver reports (see
// internal/clients). Run as a single-file program:
//
//   java -cp /usr/share/java/mariadb-java-client.jar Scenario.java
//
// Environment: SP_HOST, SP_PORT, SP_USER, SP_PASSWORD, SP_DATABASE,
// SP_SCENARIO and SP_MODE, one of
//   statement              java.sql.Statement for everything; parameters
//                          are written into the SQL
//   server-prepared        PreparedStatement with useServerPrepStmts=true
//   client-prepared        PreparedStatement with useServerPrepStmts=false
//   batch-server-prepared  executeBatch() of 1,000 rows, useServerPrepStmts=true
//   batch-rewrite          executeBatch() of 1,000 rows, rewriteBatchedStatements=true
//
// Every result set prints its ResultSetMetaData ("meta" lines: labels,
// column type names, getColumnClassName) and each value with the class
// getObject() returned. After a step that broke the connection (SQLSTATE
// 08xxx, or an exception that is not an SQLException), the program
// reconnects, prints "reconnected" and goes on.

import java.io.IOException;
import java.math.BigDecimal;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.SQLWarning;
import java.sql.Statement;
import java.sql.Types;
import java.util.ArrayList;
import java.util.List;

public class Scenario {
    /** One line of the scenario file. */
    record Step(String kind, String sql, List<Object> params) {}

    static String env(String name) {
        String v = System.getenv(name);
        if (v == null) {
            System.err.println("missing environment variable " + name);
            System.exit(2);
        }
        return v;
    }

    static void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    /** Removes what differs between any two connections: the connection id. */
    static String canon(String s) {
        return s == null ? "null" : s.replaceAll("\\(conn=\\d+\\)", "(conn=N)");
    }

    static String val(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof byte[] b) {
            StringBuilder sb = new StringBuilder("byte[]=0x");
            for (byte x : b) {
                sb.append(String.format("%02x", x));
            }
            return sb.toString();
        }
        if (v instanceof String s) {
            return "String='" + s + "'";
        }
        return v.getClass().getSimpleName() + "=" + v;
    }

    static List<Step> scenario(String path) throws IOException {
        List<Step> steps = new ArrayList<>();
        for (String line : Files.readAllLines(Path.of(path))) {
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            String[] f = line.split("\t", -1);
            List<Object> params = new ArrayList<>();
            for (int i = 2; i < f.length; i++) {
                String p = f[i].substring(2);
                switch (f[i].charAt(0)) {
                    case 'i' -> params.add(Long.parseLong(p));
                    case 's' -> params.add(p);
                    default -> params.add(null);
                }
            }
            steps.add(new Step(f[0], f.length > 1 ? f[1] : "", params));
        }
        return steps;
    }

    static Connection connect(String options) throws SQLException {
        String url = String.format("jdbc:mariadb://%s:%s/%s?user=%s&password=%s%s",
                env("SP_HOST"), env("SP_PORT"), env("SP_DATABASE"), env("SP_USER"), env("SP_PASSWORD"), options);
        return DriverManager.getConnection(url);
    }

    static void printResultSet(ResultSet rs) throws SQLException {
        ResultSetMetaData md = rs.getMetaData();
        int n = md.getColumnCount();
        for (int i = 1; i <= n; i++) {
            out(String.format("meta label=%s name=%s table=%s catalog=%s type=%d typeName=%s class=%s precision=%d scale=%d displaySize=%d nullable=%d signed=%b autoIncrement=%b",
                    md.getColumnLabel(i), md.getColumnName(i), md.getTableName(i), md.getCatalogName(i),
                    md.getColumnType(i), md.getColumnTypeName(i), md.getColumnClassName(i), md.getPrecision(i),
                    md.getScale(i), md.getColumnDisplaySize(i), md.isNullable(i), md.isSigned(i), md.isAutoIncrement(i)));
        }
        int rows = 0;
        while (rs.next()) {
            rows++;
            StringBuilder sb = new StringBuilder("row ");
            for (int i = 1; i <= n; i++) {
                if (i > 1) {
                    sb.append(" | ");
                }
                sb.append(val(rs.getObject(i)));
            }
            out(sb.toString());
        }
        out("rows " + rows);
    }

    static void printWarnings(SQLWarning w) {
        for (; w != null; w = w.getNextWarning()) {
            out(String.format("warning %d %s %s", w.getErrorCode(), w.getSQLState(), canon(w.getMessage())));
        }
    }

    /** Prints everything a statement that has just run reports. */
    static void printOutcome(Statement st, boolean isResultSet) throws SQLException {
        if (isResultSet) {
            try (ResultSet rs = st.getResultSet()) {
                printResultSet(rs);
            }
        } else {
            out("update count " + st.getUpdateCount());
            try (ResultSet keys = st.getGeneratedKeys()) {
                StringBuilder sb = new StringBuilder("generated keys");
                while (keys.next()) {
                    sb.append(' ').append(val(keys.getObject(1)));
                }
                out(sb.toString());
            }
        }
        printWarnings(st.getWarnings());
    }

    static String literal(Object p) {
        if (p == null) {
            return "NULL";
        }
        if (p instanceof Long) {
            return p.toString();
        }
        return "'" + p.toString().replace("\\", "\\\\").replace("'", "''") + "'";
    }

    static String interpolate(String sql, List<Object> params) {
        StringBuilder sb = new StringBuilder();
        int next = 0;
        for (char c : sql.toCharArray()) {
            if (c == '?') {
                sb.append(literal(params.get(next++)));
            } else {
                sb.append(c);
            }
        }
        return sb.toString();
    }

    static void runScenario(String mode) throws Exception {
        String options = switch (mode) {
            case "statement", "client-prepared" -> "&useServerPrepStmts=false";
            case "server-prepared" -> "&useServerPrepStmts=true";
            default -> throw new IllegalArgumentException("unknown mode " + mode);
        };
        List<Step> steps = scenario(env("SP_SCENARIO"));
        Connection conn = connect(options);
        boolean broken = false;
        for (int n = 0; n < steps.size(); n++) {
            Step s = steps.get(n);
            if (broken) {
                try {
                    conn.close();
                } catch (Exception e) {
                    // the connection is gone either way
                }
                conn = connect(options);
                out("reconnected");
                broken = false;
            }
            StringBuilder head = new StringBuilder(String.format("> %d %s %s", n + 1, s.kind(), s.sql()));
            if (!s.params().isEmpty()) {
                head.append(" ").append(s.params());
            }
            out(head.toString());
            try {
                switch (s.kind()) {
                    case "begin" -> conn.setAutoCommit(false);
                    case "commit" -> {
                        conn.commit();
                        conn.setAutoCommit(true);
                    }
                    case "rollback" -> {
                        conn.rollback();
                        conn.setAutoCommit(true);
                    }
                    case "prepare" -> {
                        if (mode.equals("statement")) {
                            runText(conn, interpolate(s.sql(), s.params()));
                            break;
                        }
                        try (PreparedStatement ps = conn.prepareStatement(s.sql(), Statement.RETURN_GENERATED_KEYS)) {
                            for (int i = 0; i < s.params().size(); i++) {
                                Object p = s.params().get(i);
                                if (p == null) {
                                    ps.setNull(i + 1, Types.VARCHAR);
                                } else if (p instanceof Long l) {
                                    ps.setLong(i + 1, l);
                                } else {
                                    ps.setString(i + 1, (String) p);
                                }
                            }
                            printOutcome(ps, ps.execute());
                        }
                    }
                    case "query" -> runText(conn, s.sql());
                    default -> throw new IllegalArgumentException("unknown step " + s.kind());
                }
            } catch (SQLException e) {
                out(String.format("error %d %s %s (%s)", e.getErrorCode(), e.getSQLState(), canon(e.getMessage()),
                        e.getClass().getSimpleName()));
                if (e.getSQLState() != null && e.getSQLState().startsWith("08")) {
                    broken = true;
                }
            } catch (RuntimeException e) {
                out("exception " + e.getClass().getName() + ": " + canon(e.getMessage()));
                broken = true;
            }
        }
        conn.close();
    }

    static void runText(Connection conn, String sql) throws SQLException {
        try (Statement st = conn.createStatement()) {
            printOutcome(st, st.execute(sql, Statement.RETURN_GENERATED_KEYS));
        }
    }

    /** Prints update counts run-length encoded: "1 x3, 0, 1 x996". */
    static String counts(int[] c) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < c.length; ) {
            int j = i;
            while (j < c.length && c[j] == c[i]) {
                j++;
            }
            if (sb.length() > 0) {
                sb.append(", ");
            }
            sb.append(c[i]);
            if (j - i > 1) {
                sb.append(" x").append(j - i);
            }
            i = j;
        }
        return "counts [" + c.length + "] " + sb;
    }

    static void totals(Connection conn) throws SQLException {
        for (String q : new String[] {
                "SELECT id, downloads, stars FROM repos ORDER BY id",
                "SELECT COUNT(*), SUM(repo_id), SUM(amount), MIN(id), MAX(id) FROM events"}) {
            out("> " + q);
            runText(conn, q);
        }
    }

    static void batchStep(String what, Connection conn, BatchBody body) {
        out("> " + what);
        try {
            body.run(conn);
        } catch (java.sql.BatchUpdateException e) {
            out(String.format("batch error %d %s %s; %s", e.getErrorCode(), e.getSQLState(), canon(e.getMessage()), counts(e.getUpdateCounts())));
        } catch (SQLException e) {
            out(String.format("error %d %s %s (%s)", e.getErrorCode(), e.getSQLState(), canon(e.getMessage()), e.getClass().getSimpleName()));
        }
    }

    interface BatchBody {
        void run(Connection conn) throws SQLException;
    }

    /** Key of the i-th batched increment: the four rows, the last 100 a missing one. */
    static long batchKey(int i) {
        return i >= 900 ? 999 : 1 + i % 4;
    }

    static void runBatch(String mode) throws Exception {
        String options = switch (mode) {
            case "batch-server-prepared" -> "&useServerPrepStmts=true";
            case "batch-rewrite" -> "&rewriteBatchedStatements=true";
            default -> throw new IllegalArgumentException("unknown mode " + mode);
        };
        int rows = 1000;
        try (Connection conn = connect(options)) {
            batchStep("prepared increments on the ruled table, autocommit", conn, c -> {
                try (PreparedStatement ps = c.prepareStatement("UPDATE repos SET downloads = downloads + ? WHERE id = ?")) {
                    for (int i = 0; i < rows; i++) {
                        ps.setInt(1, 1 + i % 3);
                        ps.setLong(2, batchKey(i));
                        ps.addBatch();
                    }
                    out(counts(ps.executeBatch()));
                }
            });
            batchStep("prepared inserts into a plain table", conn, c -> {
                try (PreparedStatement ps = c.prepareStatement("INSERT INTO events (repo_id, kind, amount) VALUES (?, ?, ?)",
                        Statement.RETURN_GENERATED_KEYS)) {
                    for (int i = 0; i < rows; i++) {
                        ps.setLong(1, 1 + i % 4);
                        ps.setString(2, "batch");
                        ps.setBigDecimal(3, BigDecimal.valueOf(i, 2));
                        ps.addBatch();
                    }
                    out(counts(ps.executeBatch()));
                    try (ResultSet keys = ps.getGeneratedKeys()) {
                        long count = 0, sum = 0;
                        while (keys.next()) {
                            count++;
                            sum += keys.getLong(1);
                        }
                        out("generated keys " + count + " sum " + sum);
                    }
                }
            });
            batchStep("prepared increments of two counters in a committed transaction", conn, c -> {
                c.setAutoCommit(false);
                try (PreparedStatement ps = c.prepareStatement("UPDATE repos SET downloads = downloads + ?, stars = stars + ? WHERE id = ?")) {
                    for (int i = 0; i < rows; i++) {
                        ps.setInt(1, 1);
                        ps.setInt(2, 2);
                        ps.setLong(3, batchKey(i));
                        ps.addBatch();
                    }
                    out(counts(ps.executeBatch()));
                }
                c.commit();
                c.setAutoCommit(true);
            });
            batchStep("prepared increments in a rolled-back transaction", conn, c -> {
                c.setAutoCommit(false);
                try (PreparedStatement ps = c.prepareStatement("UPDATE repos SET downloads = downloads + ? WHERE id = ?")) {
                    for (int i = 0; i < rows; i++) {
                        ps.setInt(1, 100);
                        ps.setLong(2, batchKey(i));
                        ps.addBatch();
                    }
                    out(counts(ps.executeBatch()));
                }
                c.rollback();
                c.setAutoCommit(true);
            });
            batchStep("text increments and inserts in a Statement batch", conn, c -> {
                try (Statement st = c.createStatement()) {
                    for (int i = 0; i < rows; i++) {
                        if (i % 2 == 0) {
                            st.addBatch("UPDATE repos SET downloads = downloads + 1 WHERE id = " + batchKey(i));
                        } else {
                            st.addBatch("INSERT INTO events (repo_id, kind) VALUES (" + (1 + i % 4) + ", 'text batch')");
                        }
                    }
                    out(counts(st.executeBatch()));
                }
            });
            batchStep("a batch with a failing row", conn, c -> {
                try (PreparedStatement ps = c.prepareStatement("INSERT INTO repos (id, name) VALUES (?, ?)")) {
                    for (long id : new long[] {20, 21, 1, 22}) {
                        ps.setLong(1, id);
                        ps.setString(2, "batch " + id);
                        ps.addBatch();
                    }
                    out(counts(ps.executeBatch()));
                }
            });
            batchStep("totals", conn, Scenario::totals);
        }
    }

    public static void main(String[] args) throws Exception {
        String mode = env("SP_MODE");
        if (mode.startsWith("batch-")) {
            runBatch(mode);
        } else {
            runScenario(mode);
        }
        out("done");
    }
}
