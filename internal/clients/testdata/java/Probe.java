// Probe checks that java runs single-file programs and that MariaDB
// Connector/J is on the class path (internal/clients requires both).
public class Probe {
    public static void main(String[] args) throws Exception {
        Class.forName("org.mariadb.jdbc.Driver");
    }
}
