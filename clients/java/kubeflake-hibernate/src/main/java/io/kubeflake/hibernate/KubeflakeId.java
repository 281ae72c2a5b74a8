package io.kubeflake.hibernate;

import static java.lang.annotation.ElementType.FIELD;
import static java.lang.annotation.ElementType.METHOD;
import static java.lang.annotation.RetentionPolicy.RUNTIME;

import java.lang.annotation.Retention;
import java.lang.annotation.Target;
import org.hibernate.annotations.IdGeneratorType;

/**
 * An entity's {@code Long} (or {@code long}) id taken from the kubeflake sidecar, through the
 * client's prefetch buffer: one memory read per row, also for batch inserts
 * ({@code hibernate.jdbc.batch_size}), since the id is known before the insert runs.
 *
 * <pre>{@code
 * @Entity
 * class Purchase {
 *     @Id @KubeflakeId Long id;
 * }
 * }</pre>
 *
 * <p>The client is the {@link io.kubeflake.client.KubeflakeClient} given in the Hibernate
 * setting {@value KubeflakeIdGenerator#CLIENT_SETTING}, else one client per process made
 * from the environment ({@code KUBEFLAKE_SOCKET}, else {@code KUBEFLAKE_URL}).
 */
@IdGeneratorType(KubeflakeIdGenerator.class)
@Retention(RUNTIME)
@Target({FIELD, METHOD})
public @interface KubeflakeId {
}
