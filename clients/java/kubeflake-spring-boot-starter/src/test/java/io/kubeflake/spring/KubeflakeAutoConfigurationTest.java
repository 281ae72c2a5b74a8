package io.kubeflake.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.kubeflake.client.KubeflakeClient;
import io.kubeflake.hibernate.KubeflakeIdGenerator;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.boot.Banner;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.hibernate.autoconfigure.HibernatePropertiesCustomizer;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

/** A Spring Boot context starting with the starter, against a real standalone sidecar. */
class KubeflakeAutoConfigurationTest {
    static Path dir;
    static Process sidecar;

    @BeforeAll
    static void startSidecar() throws Exception {
        dir = Files.createTempDirectory("kubeflake-java-spring-");
        String bin = System.getenv("KUBEFLAKE_SIDECAR_BIN");
        if (bin == null || bin.isEmpty()) {
            throw new IllegalStateException("set KUBEFLAKE_SIDECAR_BIN to a kubeflake-sidecar binary (clients/java/test.sh does)");
        }
        sidecar = new ProcessBuilder(bin, "standalone", "--listen", "127.0.0.1:0", "--listen-unix",
                dir.resolve("api.sock").toString(), "--state-dir", dir.resolve("state").toString())
                .redirectErrorStream(true).redirectOutput(dir.resolve("log").toFile()).start();
    }

    @AfterAll
    static void stopSidecar() throws Exception {
        sidecar.destroy();
        sidecar.waitFor(10, TimeUnit.SECONDS);
        try (Stream<Path> paths = Files.walk(dir)) {
            paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }

    final ApplicationContextRunner runner = new ApplicationContextRunner()
            .withConfiguration(AutoConfigurations.of(KubeflakeAutoConfiguration.class))
            .withPropertyValues("kubeflake.socket=" + dir.resolve("api.sock"), "kubeflake.max-wait=20s");

    @SpringBootConfiguration
    @EnableAutoConfiguration
    static class App {
    }

    @Test
    void aSpringBootAppGetsAClientBeanFromTheStarterAlone() {
        SpringApplication app = new SpringApplication(App.class);
        app.setWebApplicationType(WebApplicationType.NONE);
        app.setBannerMode(Banner.Mode.OFF);
        app.setLogStartupInfo(false);
        KubeflakeClient client;
        try (ConfigurableApplicationContext context = app.run(
                "--kubeflake.socket=" + dir.resolve("api.sock"), "--kubeflake.max-wait=20s")) {
            client = context.getBean(KubeflakeClient.class);
            assertEquals("unix", client.transport());
            assertTrue(client.nextId() > 0);
        }
        assertThrows(IllegalStateException.class, client::nextId, "the client closes with the context");
    }

    @Test
    void propertiesConfigureTheClient() {
        runner.withPropertyValues("kubeflake.prefetch=false").run(context -> {
            KubeflakeClient client = context.getBean(KubeflakeClient.class);
            client.nextId();
            client.nextId();
            assertEquals(2, client.stats().direct(), "prefetch=false: one request per ID");
        });
    }

    @Test
    void aMaxRangeBelowMinBatchFailsTheContextNamingBoth() {
        runner.withPropertyValues("kubeflake.min-batch=64", "kubeflake.max-range=10").run(context -> {
            Throwable failure = context.getStartupFailure();
            assertNotNull(failure, "kubeflake.max-range is passed to the client, which refuses it");
            Throwable cause = failure;
            while (cause.getCause() != null) {
                cause = cause.getCause();
            }
            assertTrue(cause.getMessage().contains("need minBatch <= maxRange, got 64 and 10"), cause.getMessage());
        });
    }

    @Test
    void anAppsOwnClientBeanWins() {
        runner.withUserConfiguration(OwnClient.class).run(context ->
                assertSame(OwnClient.CLIENT, context.getBean(KubeflakeClient.class)));
    }

    @Configuration(proxyBeanMethods = false)
    static class OwnClient {
        static final KubeflakeClient CLIENT = KubeflakeClient.builder().url("http://127.0.0.1:9").build();

        @Bean
        KubeflakeClient ownClient() {
            return CLIENT;
        }
    }

    @Test
    void kubeflakeIdInHibernateTakesItsIdsFromTheBean() {
        runner.run(context -> {
            Map<String, Object> hibernateSettings = new HashMap<>();
            context.getBean(HibernatePropertiesCustomizer.class).customize(hibernateSettings);
            assertSame(context.getBean(KubeflakeClient.class), hibernateSettings.get(KubeflakeIdGenerator.CLIENT_SETTING));
        });
    }

    @Test
    void theClientsCountersAreMicrometerMeters() {
        runner.run(context -> {
            KubeflakeClient client = context.getBean(KubeflakeClient.class);
            SimpleMeterRegistry registry = new SimpleMeterRegistry();
            context.getBean(KubeflakeClientMetrics.class).bindTo(registry);
            for (int i = 0; i < 100; i++) {
                client.nextId();
            }
            assertEquals(100.0, registry.get("kubeflake.client.ids").functionCounter().count());
            assertTrue(registry.get("kubeflake.client.refills").functionCounter().count() >= 1);
            assertEquals(client.stats().bufferDepth(), registry.get("kubeflake.client.buffer.depth").gauge().value());
            assertEquals(0.0, registry.get("kubeflake.client.errors").tag("kind", "no_sidecar").functionCounter().count());
        });
    }
}
