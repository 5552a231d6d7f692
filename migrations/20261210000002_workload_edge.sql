-- The workload edge of each cluster, as its last convergence left it: where
-- the shared Gateway sends the cluster's sites (its nodes' NodePorts, or
-- nowhere and why), the hostnames it serves, and the last failure.
CREATE TABLE workload_edges (
    cluster_id     uuid        PRIMARY KEY REFERENCES clusters (id) ON DELETE CASCADE,
    backend        text        NOT NULL CHECK (backend IN ('node_ports', 'unavailable')),
    backend_reason text,
    endpoints      text[]      NOT NULL DEFAULT '{}',
    hostnames      text[]      NOT NULL DEFAULT '{}',
    converged_at   timestamptz NOT NULL DEFAULT now(),
    last_error     text,
    last_error_at  timestamptz
);

-- Where each binding is served: its HTTPRoute, the Gateway listener, and
-- with HTTPS for a self-managed hostname, its certificate's Secret.
ALTER TABLE workload_ingress_hostname_bindings
    ADD COLUMN edge_route       text,
    ADD COLUMN edge_listener    text,
    ADD COLUMN edge_certificate text;
