package io.kubeflake.hibernate;

import jakarta.persistence.Entity;
import jakarta.persistence.Id;

/** An entity whose id comes from the sidecar. */
@Entity
public class Purchase {
    @Id
    @KubeflakeId
    private Long id;

    private String item;

    protected Purchase() {
    }

    Purchase(String item) {
        this.item = item;
    }

    Long getId() {
        return id;
    }
}
