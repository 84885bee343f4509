// JDBC's prepared increments with MariaDB Connector/J 2.x and server-side
// prepares (useServerPrepStmts=true), as a Hibernate/JPA application sends
// them, run by the tests in internal/clients/orm_test.go.
//
// Usage: java -cp /usr/share/java/mariadb-java-client.jar Counters.java. The
// environment says where to connect (SP_HOST, SP_PORT, SP_DATABASE, SP_USER,
// SP_PASSWORD) and what to do: SP_WORKERS threads (each with its own
// connection) each run SP_ITERATIONS increments, cycling through the
// spellings below, then the totals are read back. Prints, per spelling and
// counter, "inc ID COLUMN DELTA SCOPE CALLS AFFECTED" (SCOPE "-" or
// "tenant=N"; AFFECTED "-" when the driver does not report it), then
// "total ID COLUMN VALUE" per row and counter. A batch of n increments
// counts as n calls.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

public class Counters {
    static String env(String name) {
        String v = System.getenv(name);
        if (v == null) {
            System.err.println("Counters.java: " + name + " is not set");
            System.exit(1);
        }
        return v;
    }

    static Connection connect() throws SQLException {
        String url = String.format("jdbc:mariadb://%s:%s/%s?user=%s&password=%s&useServerPrepStmts=true",
                env("SP_HOST"), env("SP_PORT"), env("SP_DATABASE"), env("SP_USER"), env("SP_PASSWORD"));
        return DriverManager.getConnection(url);
    }

    // One increment: its counters ({id, column, delta, scope}) and how to
    // run it once; run returns {calls, affected} (affected -1: not reported).
    record Inc(String id, String column, int delta, String scope) {}

    interface Run {
        long[] run(Connection c) throws SQLException;
    }

    record Spelling(String name, List<Inc> incs, Run run) {}

    static final int BATCH = 5;

    static long[] update(Connection c, String sql, Object... params) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) {
                ps.setObject(i + 1, params[i]);
            }
            return new long[] {1, ps.executeUpdate()};
        }
    }

    static final List<Spelling> SPELLINGS = List.of(
            // setInt delta, setLong key: INT and BIGINT parameters.
            new Spelling("prepared", List.of(new Inc("1", "downloads", 1, "-")), c -> {
                try (PreparedStatement ps = c.prepareStatement("UPDATE repos SET downloads = downloads + ? WHERE id = ?")) {
                    ps.setInt(1, 1);
                    ps.setLong(2, 1L);
                    return new long[] {1, ps.executeUpdate()};
                }
            }),
            // What Hibernate 5 sends for the HQL
            // "update Repo set downloads = downloads + 1 where id = :id".
            new Spelling("hibernate-hql", List.of(new Inc("1", "downloads", 1, "-")),
                    c -> update(c, "update repos set downloads=downloads+1 where id=?", 1L)),
            // The same in a JPA transaction (@Transactional @Modifying).
            new Spelling("transaction", List.of(new Inc("1", "downloads", 2, "-")), c -> {
                for (int attempt = 0; ; attempt++) {
                    c.setAutoCommit(false);
                    try {
                        long[] r = update(c, "update repos set downloads=downloads+? where id=?", 2, 1L);
                        c.commit();
                        return r;
                    } catch (SQLException e) {
                        c.rollback();
                        if ((e.getErrorCode() != 1213 && e.getErrorCode() != 1205) || attempt >= 5) {
                            throw e;
                        }
                    } finally {
                        c.setAutoCommit(true);
                    }
                }
            }),
            // executeBatch() of BATCH increments.
            new Spelling("batch", List.of(new Inc("1", "stars", 1, "-")), c -> {
                try (PreparedStatement ps = c.prepareStatement("update repos set stars=stars+? where id=?")) {
                    for (int i = 0; i < BATCH; i++) {
                        ps.setInt(1, 1);
                        ps.setLong(2, 1L);
                        ps.addBatch();
                    }
                    long affected = 0;
                    for (int n : ps.executeBatch()) {
                        if (n < 0) {
                            affected = -1;
                            break;
                        }
                        affected += n;
                    }
                    return new long[] {BATCH, affected};
                }
            }),
            new Spelling("tenant", List.of(new Inc("2", "downloads", 1, "tenant=7")),
                    c -> update(c, "update repos set downloads=downloads+? where id=? and tenant_id=?", 1, 2L, 7)),
            new Spelling("tenant-other", List.of(new Inc("1", "downloads", 1, "tenant=7")),
                    c -> update(c, "update repos set downloads=downloads+? where id=? and tenant_id=?", 1, 1L, 7)));

    public static void main(String[] args) throws Exception {
        int workers = Integer.parseInt(env("SP_WORKERS"));
        int iterations = Integer.parseInt(env("SP_ITERATIONS"));
        int n = SPELLINGS.size();
        long[][] calls = new long[workers][n];
        long[][] affected = new long[workers][n];
        List<Thread> threads = new ArrayList<>();
        List<String> errors = new ArrayList<>();
        for (int w = 0; w < workers; w++) {
            final int worker = w;
            Thread t = new Thread(() -> {
                try (Connection c = connect()) {
                    for (int i = 0; i < iterations; i++) {
                        int s = (worker + i) % n;
                        long[] r = SPELLINGS.get(s).run().run(c);
                        calls[worker][s] += r[0];
                        if (r[1] < 0 || affected[worker][s] < 0) {
                            affected[worker][s] = -1;
                        } else {
                            affected[worker][s] += r[1];
                        }
                    }
                } catch (Exception e) {
                    synchronized (errors) {
                        errors.add("worker " + worker + ": " + e);
                    }
                }
            });
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join();
        }
        if (!errors.isEmpty()) {
            errors.forEach(System.err::println);
            System.exit(1);
        }
        StringBuilder out = new StringBuilder();
        for (int s = 0; s < n; s++) {
            long c = 0, a = 0;
            for (int w = 0; w < workers; w++) {
                c += calls[w][s];
                a = a < 0 || affected[w][s] < 0 ? -1 : a + affected[w][s];
            }
            for (Inc inc : SPELLINGS.get(s).incs()) {
                out.append(String.format("inc %s %s %d %s %d %s%n", inc.id(), inc.column(), inc.delta(), inc.scope(), c,
                        a < 0 ? "-" : Long.toString(a)));
            }
        }
        try (Connection c = connect();
                PreparedStatement ps = c.prepareStatement("SELECT id, downloads, stars FROM repos ORDER BY id");
                ResultSet rs = ps.executeQuery()) {
            while (rs.next()) {
                out.append(String.format("total %d downloads %d%n", rs.getLong(1), rs.getLong(2)));
                out.append(String.format("total %d stars %d%n", rs.getLong(1), rs.getLong(3)));
            }
        }
        System.out.print(out);
    }
}
