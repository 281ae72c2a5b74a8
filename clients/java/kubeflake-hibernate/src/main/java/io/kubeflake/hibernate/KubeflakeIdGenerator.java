package io.kubeflake.hibernate;

import io.kubeflake.client.KubeflakeClient;
import java.lang.reflect.Field;
import java.lang.reflect.Member;
import java.lang.reflect.Method;
import java.util.EnumSet;
import org.hibernate.MappingException;
import org.hibernate.engine.config.spi.ConfigurationService;
import org.hibernate.engine.spi.SharedSessionContractImplementor;
import org.hibernate.generator.BeforeExecutionGenerator;
import org.hibernate.generator.EventType;
import org.hibernate.generator.EventTypeSets;
import org.hibernate.generator.GeneratorCreationContext;

/**
 * The generator behind {@link KubeflakeId}: a {@link BeforeExecutionGenerator}, so Hibernate
 * knows each id before it inserts the row and can batch the inserts (an identity-style
 * generator, executed by the database, would turn batching off).
 */
public final class KubeflakeIdGenerator implements BeforeExecutionGenerator {
    private static final long serialVersionUID = 1L;

    /** The Hibernate setting holding the {@link KubeflakeClient} instance to take ids from. */
    public static final String CLIENT_SETTING = "kubeflake.client";

    private transient volatile KubeflakeClient client;

    /** Made by Hibernate for each {@code @KubeflakeId} property. */
    public KubeflakeIdGenerator(KubeflakeId config, Member member, GeneratorCreationContext context) {
        Class<?> type = member instanceof Field ? ((Field) member).getType()
                : member instanceof Method ? ((Method) member).getReturnType() : Long.class;
        if (type != Long.class && type != long.class) {
            throw new MappingException("@KubeflakeId on " + member.getDeclaringClass().getName() + "." + member.getName()
                    + " needs a Long or long id (kubeflake IDs are 63-bit), not " + type.getName());
        }
        Object configured = context.getServiceRegistry().requireService(ConfigurationService.class)
                .getSettings().get(CLIENT_SETTING);
        if (configured != null && !(configured instanceof KubeflakeClient)) {
            throw new MappingException("the Hibernate setting " + CLIENT_SETTING
                    + " must be a KubeflakeClient instance, not " + configured.getClass().getName());
        }
        this.client = (KubeflakeClient) configured;
    }

    @Override
    public Object generate(SharedSessionContractImplementor session, Object owner, Object currentValue,
                           EventType eventType) {
        KubeflakeClient c = client;
        if (c == null) {
            c = SharedClient.get();
            client = c;
        }
        return c.nextId();
    }

    @Override
    public EnumSet<EventType> getEventTypes() {
        return EventTypeSets.INSERT_ONLY;
    }

    /** One client per process, from the environment, when no client was configured. */
    private static final class SharedClient {
        private static final KubeflakeClient INSTANCE = KubeflakeClient.create();

        static KubeflakeClient get() {
            return INSTANCE;
        }
    }
}
