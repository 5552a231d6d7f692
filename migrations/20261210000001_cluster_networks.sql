-- Each cluster's pod and service networks, allocated from the pools the
-- platform is configured with (KUBEBYON_POD_CIDR_POOLS,
-- KUBEBYON_SERVICE_CIDR_POOLS) as the cluster is created, in the create
-- request's transaction, and released when its host namespace is gone.
--
-- No two live allocations overlap, whatever their purpose: the exclusion
-- constraint refuses it, so a race the allocator's lock did not order still
-- cannot hand one network to two clusters.
CREATE TABLE cluster_networks (
    cidr         cidr        NOT NULL,
    cluster_id   uuid        NOT NULL REFERENCES clusters (id) ON DELETE CASCADE
                             DEFERRABLE INITIALLY DEFERRED,
    purpose      text        NOT NULL CHECK (purpose IN ('pod', 'service')),
    allocated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster_id, purpose),
    CONSTRAINT cluster_networks_no_overlap EXCLUDE USING gist (cidr inet_ops WITH &&),
    CONSTRAINT cluster_networks_ipv4 CHECK (family(cidr) = 4)
);

-- The clusters' own columns (pod_cidr, service_cidr, in the schema from the
-- start) say what each control plane was made with, and keep it after
-- deletion as the rest of the snapshot does. They are NULL for clusters
-- made before allocation, whose control planes run the chart's former fixed
-- networks (10.64.0.0/16, 10.128.0.0/16) and overlap one another: the
-- workload edge never routes to their pods directly.
