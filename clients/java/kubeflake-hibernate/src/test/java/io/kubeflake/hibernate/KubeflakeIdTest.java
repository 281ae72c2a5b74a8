package io.kubeflake.hibernate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.kubeflake.client.KubeflakeClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.hibernate.SessionFactory;
import org.hibernate.cfg.Configuration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** {@code @KubeflakeId} entities persisted in batches into a real PostgreSQL, ids from a real sidecar. */
class KubeflakeIdTest {
    static final int ROWS = 10_000;
    static final int BATCH = 50;

    static Path sidecarDir;
    static Process sidecar;
    static Postgres postgres;
    static KubeflakeClient client;
    static SessionFactory sessions;

    @BeforeAll
    static void start() throws Exception {
        sidecarDir = Files.createTempDirectory("kubeflake-java-hibernate-");
        Path socket = sidecarDir.resolve("api.sock");
        String bin = System.getenv("KUBEFLAKE_SIDECAR_BIN");
        if (bin == null || bin.isEmpty()) {
            throw new IllegalStateException("set KUBEFLAKE_SIDECAR_BIN to a kubeflake-sidecar binary (clients/java/test.sh does)");
        }
        // A loopback port nobody else takes: the API is used on the socket only.
        sidecar = new ProcessBuilder(bin, "standalone", "--listen", "127.0.0.1:0", "--listen-unix", socket.toString(),
                "--state-dir", sidecarDir.resolve("state").toString())
                .redirectErrorStream(true).redirectOutput(sidecarDir.resolve("log").toFile()).start();
        postgres = Postgres.start();
        client = KubeflakeClient.builder().socket(socket).maxWait(java.time.Duration.ofSeconds(20)).build();
        client.mode(); // waits (bounded) for the sidecar to answer
        Configuration config = new Configuration();
        config.getProperties().put(KubeflakeIdGenerator.CLIENT_SETTING, client);
        sessions = config
                .addAnnotatedClass(Purchase.class)
                .setProperty("jakarta.persistence.jdbc.url", postgres.jdbcUrl())
                .setProperty("jakarta.persistence.jdbc.user", Postgres.USER)
                .setProperty("jakarta.persistence.jdbc.password", "")
                .setProperty("hibernate.hbm2ddl.auto", "create")
                .setProperty("hibernate.jdbc.batch_size", Integer.toString(BATCH))
                .setProperty("hibernate.order_inserts", "true")
                .setProperty("hibernate.generate_statistics", "true")
                .setProperty("hibernate.connection.pool_size", "2")
                .buildSessionFactory();
    }

    @AfterAll
    static void stop() throws Exception {
        if (sessions != null) {
            sessions.close();
        }
        if (client != null) {
            client.close();
        }
        if (postgres != null) {
            postgres.close();
        }
        if (sidecar != null) {
            sidecar.destroy();
            sidecar.waitFor(10, TimeUnit.SECONDS);
        }
        try (Stream<Path> paths = Files.walk(sidecarDir)) {
            paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }

    @Test
    void tenThousandEntitiesPersistedInBatchesGetTenThousandDistinctIds() throws Exception {
        sessions.getStatistics().clear();
        List<Long> assigned = new ArrayList<>();
        sessions.inTransaction(session -> {
            for (int i = 0; i < ROWS; i++) {
                Purchase p = new Purchase("item " + i);
                session.persist(p);
                assertNotNull(p.getId(), "the id is known at persist, before the insert runs");
                assigned.add(p.getId());
                if ((i + 1) % BATCH == 0) {
                    session.flush();
                    session.clear();
                }
            }
        });
        Set<Long> distinct = new HashSet<>(assigned);
        assertEquals(ROWS, distinct.size(), "duplicate ids among the entities");

        try (Connection c = postgres.connect(); Statement s = c.createStatement();
             ResultSet r = s.executeQuery("select count(*), count(distinct id), min(id) from Purchase")) {
            r.next();
            assertEquals(ROWS, r.getLong(1), "rows in PostgreSQL");
            assertEquals(ROWS, r.getLong(2), "distinct ids in PostgreSQL");
            assertTrue(r.getLong(3) > 0, "ids from the sidecar, not 0");
        }

        long statements = sessions.getStatistics().getPrepareStatementCount();
        assertTrue(statements <= ROWS / BATCH + 10,
                "the inserts were not batched: " + statements + " statements for " + ROWS + " rows");
        assertTrue(client.stats().refills() < ROWS / 64, "ids came from the buffer, not one request each: " + client.stats());
    }
}
