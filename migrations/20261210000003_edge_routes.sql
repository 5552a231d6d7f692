-- The route plan: which part of a cluster's pod network (a node's podCIDR,
-- inside the network allocated to the cluster) the host reaches through
-- which of the cluster's nodes. No two destinations overlap.
CREATE TABLE edge_routes (
    cluster_id  uuid NOT NULL REFERENCES clusters (id) ON DELETE CASCADE,
    node_name   text NOT NULL,
    destination cidr NOT NULL,
    via         inet NOT NULL,
    PRIMARY KEY (cluster_id, node_name),
    CONSTRAINT edge_routes_one_way EXCLUDE USING gist (destination inet_ops WITH &&)
);

-- What each host node's route agent last reported applying.
CREATE TABLE route_agent_reports (
    host_node   text        PRIMARY KEY CHECK (length(host_node) BETWEEN 1 AND 253),
    applied     cidr[]      NOT NULL DEFAULT '{}',
    failed      jsonb       NOT NULL DEFAULT '[]',
    reported_at timestamptz NOT NULL DEFAULT now()
);

-- The edge reaches a cluster's ingress pods directly once the host routes
-- to them.
ALTER TABLE workload_edges
    DROP CONSTRAINT workload_edges_backend_check,
    ADD CONSTRAINT workload_edges_backend_check
        CHECK (backend IN ('pod_ips', 'node_ports', 'unavailable'));
