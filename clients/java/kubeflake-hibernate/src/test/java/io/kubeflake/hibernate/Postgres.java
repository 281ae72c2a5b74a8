package io.kubeflake.hibernate;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.GroupPrincipal;
import java.nio.file.attribute.PosixFileAttributeView;
import java.nio.file.attribute.UserPrincipalLookupService;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * A throwaway PostgreSQL server for a test (Debian's postgresql package, the newest major
 * version installed), on a free loopback port with trust authentication, as
 * e2e/tests/sql_support does: PostgreSQL refuses to run as root, so as root it runs as the
 * package's {@code postgres} user through setpriv. Stopped and removed on close.
 */
final class Postgres implements AutoCloseable {
    static final String USER = "kf";

    private final Path dir;
    private final int port;
    private final Process server;

    private Postgres(Path dir, int port, Process server) {
        this.dir = dir;
        this.port = port;
        this.server = server;
    }

    static Postgres start() throws IOException, InterruptedException {
        Path bin = newestBin();
        Path dir = Files.createTempDirectory("kubeflake-java-postgres-");
        boolean root = "root".equals(System.getProperty("user.name"));
        if (root) {
            UserPrincipalLookupService users = dir.getFileSystem().getUserPrincipalLookupService();
            GroupPrincipal group = users.lookupPrincipalByGroupName("postgres");
            Files.setOwner(dir, users.lookupPrincipalByName("postgres"));
            Files.getFileAttributeView(dir, PosixFileAttributeView.class).setGroup(group);
        }
        run(command(root, bin.resolve("initdb"), "-D", dir.resolve("data").toString(), "-U", USER, "--auth=trust",
                "--no-sync", "-E", "UTF8", "--locale=C"), dir.resolve("initdb.log"));
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        Process server = new ProcessBuilder(command(root, bin.resolve("postgres"), "-D", dir.resolve("data").toString(),
                "-k", dir.toString(), "-p", Integer.toString(port), "-c", "listen_addresses=127.0.0.1",
                "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=off"))
                .redirectErrorStream(true).redirectOutput(dir.resolve("postgres.log").toFile()).start();
        Postgres pg = new Postgres(dir, port, server);
        for (int i = 0; i < 300; i++) { // 30 s at most
            if (!server.isAlive()) {
                break;
            }
            try (Connection c = pg.connect()) {
                return pg;
            } catch (SQLException e) {
                Thread.sleep(100);
            }
        }
        String log = Files.readString(dir.resolve("postgres.log"));
        pg.close();
        throw new IllegalStateException("PostgreSQL did not start; its log:\n" + log);
    }

    String jdbcUrl() {
        return "jdbc:postgresql://127.0.0.1:" + port + "/postgres";
    }

    Connection connect() throws SQLException {
        return DriverManager.getConnection(jdbcUrl(), USER, "");
    }

    private static Path newestBin() throws IOException {
        Path root = Path.of("/usr/lib/postgresql");
        if (Files.isDirectory(root)) {
            try (Stream<Path> versions = Files.list(root)) {
                var newest = versions.filter(p -> p.getFileName().toString().matches("\\d+"))
                        .filter(p -> Files.isExecutable(p.resolve("bin/postgres")))
                        .max(Comparator.comparingInt(p -> Integer.parseInt(p.getFileName().toString())));
                if (newest.isPresent()) {
                    return newest.get().resolve("bin");
                }
            }
        }
        throw new IllegalStateException("no PostgreSQL server under /usr/lib/postgresql/*/bin: "
                + "install Debian's postgresql package (scripts/install-deps.sh does)");
    }

    private static List<String> command(boolean root, Path program, String... args) {
        List<String> cmd = new ArrayList<>();
        if (root) {
            cmd.addAll(List.of("setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--pdeathsig=KILL", "--"));
        }
        cmd.add(program.toString());
        cmd.addAll(List.of(args));
        return cmd;
    }

    private static void run(List<String> command, Path log) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        if (!p.waitFor(60, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new IllegalStateException(command.get(0) + " did not finish within 60 s");
        }
        if (p.exitValue() != 0) {
            throw new IllegalStateException(String.join(" ", command) + " failed:\n" + Files.readString(log));
        }
    }

    @Override
    public void close() {
        server.destroy(); // SIGTERM: a smart shutdown; our connections are closed by now
        try {
            if (!server.waitFor(15, TimeUnit.SECONDS)) {
                server.destroyForcibly().waitFor();
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            server.destroyForcibly();
        }
        try (Stream<Path> paths = Files.walk(dir)) {
            paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // a temporary directory left behind
        }
    }
}
