package io.kubeflake.spring;

import io.kubeflake.client.KubeflakeClient;
import io.kubeflake.hibernate.KubeflakeIdGenerator;
import io.micrometer.core.instrument.binder.MeterBinder;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.boot.hibernate.autoconfigure.HibernatePropertiesCustomizer;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

/**
 * A {@link KubeflakeClient} bean made from {@code kubeflake.*} properties and the environment
 * (unless the app defines its own), closed with the context; with Micrometer on the class
 * path, a {@link MeterBinder} exposing its counters ({@link KubeflakeClientMetrics}); with
 * Hibernate and kubeflake-hibernate, {@code @KubeflakeId} ids from the same client.
 */
@AutoConfiguration
@ConditionalOnClass(KubeflakeClient.class)
@EnableConfigurationProperties(KubeflakeProperties.class)
public class KubeflakeAutoConfiguration {

    @Bean
    @ConditionalOnMissingBean
    public KubeflakeClient kubeflakeClient(KubeflakeProperties p) {
        KubeflakeClient.Builder b = KubeflakeClient.builder().prefetch(p.isPrefetch());
        if (p.getSocket() != null) {
            b.socket(p.getSocket());
        } else if (p.getUrl() != null && !p.getUrl().isEmpty()) {
            b.url(p.getUrl());
        }
        if (p.getMaxAge() != null) {
            b.maxAge(p.getMaxAge());
        }
        if (p.getMaxWait() != null) {
            b.maxWait(p.getMaxWait());
        }
        if (p.getRequestTimeout() != null) {
            b.requestTimeout(p.getRequestTimeout());
        }
        if (p.getMinBatch() != null) {
            b.minBatch(p.getMinBatch());
        }
        if (p.getMaxBatch() != null) {
            b.maxBatch(p.getMaxBatch());
        }
        if (p.getMaxRange() != null) {
            b.maxRange(p.getMaxRange());
        }
        if (p.getRefillPeriod() != null) {
            b.refillPeriod(p.getRefillPeriod());
        }
        return b.build();
    }

    /**
     * With Hibernate and kubeflake-hibernate on the class path: {@code @KubeflakeId} takes its
     * IDs from the bean (the Hibernate setting {@code kubeflake.client}), unless the app set it.
     */
    @Configuration(proxyBeanMethods = false)
    @ConditionalOnClass({HibernatePropertiesCustomizer.class, KubeflakeIdGenerator.class})
    static class Hibernate {
        @Bean
        HibernatePropertiesCustomizer kubeflakeHibernateClient(KubeflakeClient client) {
            return properties -> properties.putIfAbsent(KubeflakeIdGenerator.CLIENT_SETTING, client);
        }
    }

    /** The client's counters as meters, bound by Spring Boot's metrics support to its registry. */
    @Configuration(proxyBeanMethods = false)
    @ConditionalOnClass(MeterBinder.class)
    static class Metrics {
        @Bean
        @ConditionalOnMissingBean
        KubeflakeClientMetrics kubeflakeClientMetrics(KubeflakeClient client) {
            return new KubeflakeClientMetrics(client);
        }
    }
}
