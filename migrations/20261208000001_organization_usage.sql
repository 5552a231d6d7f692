-- What each organization holds of its plan, kept in one row per
-- organization in the same transaction as every write that changes it, so
-- the entitlement check reads one row instead of counting every node and
-- hostname of every cluster the organization has (a count that grew with
-- the organization and, through its join, with the whole fleet).
--
-- What is counted is what the check counted: clusters not deleted (with
-- their workload limits summed), their nodes not deleted, and the hostnames
-- bound to them. Joins under way are still counted when read: whether one
-- still holds a place depends on the clock.
--
-- Statement-level triggers with transition tables keep it: a statement
-- that writes many rows updates each organization's row once. A node or a
-- hostname counts only while its cluster is live, and a cluster's deletion
-- takes its members out of the count. Both read the other table only after
-- they hold the organization's row, with a fresh snapshot (their functions
-- are volatile), so a node written while its cluster is being deleted is
-- never left in the count: whichever of the two takes the row second sees
-- the other committed (the node added then taken out with its cluster, or
-- never added to a cluster already deleted).
CREATE TABLE organization_usage (
    organization_id uuid PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
    clusters        bigint NOT NULL DEFAULT 0 CHECK (clusters >= 0),
    nodes           bigint NOT NULL DEFAULT 0 CHECK (nodes >= 0),
    cpu_milli_cores bigint NOT NULL DEFAULT 0 CHECK (cpu_milli_cores >= 0),
    memory_mib      bigint NOT NULL DEFAULT 0 CHECK (memory_mib >= 0),
    hostnames       bigint NOT NULL DEFAULT 0 CHECK (hostnames >= 0)
);

CREATE FUNCTION organization_usage_made() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO organization_usage (organization_id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER organization_usage_made AFTER INSERT ON organizations
FOR EACH ROW EXECUTE FUNCTION organization_usage_made();

-- Nodes or hostnames of clusters, one cluster id per member that became
-- live (`gained`) or stopped being live (`lost`), added to the organizations
-- of the clusters that are live. The rows are locked in the order of their
-- ids, so two statements never wait on each other's rows in turn.
CREATE FUNCTION organization_usage_add_members(gained uuid[], lost uuid[], what text)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    cluster_ids uuid[];
    deltas bigint[];
BEGIN
    SELECT array_agg(cluster_id), array_agg(delta) INTO cluster_ids, deltas
    FROM (SELECT cluster_id, sum(delta)::bigint AS delta
          FROM (SELECT unnest(gained) AS cluster_id, 1 AS delta
                UNION ALL SELECT unnest(lost), -1) members
          GROUP BY cluster_id HAVING sum(delta) <> 0) changed;
    IF cluster_ids IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM organization_usage
    WHERE organization_id IN (SELECT organization_id FROM clusters WHERE id = ANY (cluster_ids))
    ORDER BY organization_id FOR UPDATE;
    -- A fresh snapshot, taken under the lock: a cluster whose deletion
    -- committed meanwhile has taken its members out already.
    WITH summed AS (
        SELECT c.organization_id, sum(x.delta) AS delta
        FROM unnest(cluster_ids, deltas) AS x (cluster_id, delta)
        JOIN clusters c ON c.id = x.cluster_id AND c.deleted_at IS NULL
        GROUP BY c.organization_id)
    UPDATE organization_usage u
    SET nodes = u.nodes + CASE WHEN what = 'nodes' THEN s.delta ELSE 0 END,
        hostnames = u.hostnames + CASE WHEN what = 'hostnames' THEN s.delta ELSE 0 END
    FROM summed s
    WHERE u.organization_id = s.organization_id AND s.delta <> 0;
END
$$;

-- A transition table exists only for the events that have it, so each is
-- read in its own branch.
CREATE FUNCTION organization_usage_nodes() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    gained uuid[];
    lost uuid[];
BEGIN
    IF TG_OP <> 'DELETE' THEN
        SELECT array_agg(cluster_id) INTO gained FROM new_nodes
        WHERE deleted_at IS NULL AND status <> 'deleted';
    END IF;
    IF TG_OP <> 'INSERT' THEN
        SELECT array_agg(cluster_id) INTO lost FROM old_nodes
        WHERE deleted_at IS NULL AND status <> 'deleted';
    END IF;
    PERFORM organization_usage_add_members(gained, lost, 'nodes');
    RETURN NULL;
END
$$;

CREATE FUNCTION organization_usage_hostnames() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    gained uuid[];
    lost uuid[];
BEGIN
    IF TG_OP <> 'DELETE' THEN
        SELECT array_agg(cluster_id) INTO gained FROM new_bindings WHERE deleted_at IS NULL;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        SELECT array_agg(cluster_id) INTO lost FROM old_bindings WHERE deleted_at IS NULL;
    END IF;
    PERFORM organization_usage_add_members(gained, lost, 'hostnames');
    RETURN NULL;
END
$$;

-- A cluster that became live (`sign` 1) or stopped being live (-1), as the
-- count sees it.
CREATE TYPE organization_usage_cluster AS (organization_id uuid, id uuid, sign bigint, cpu bigint, memory bigint);

-- A cluster that becomes live (or stops being live) brings (or takes) its
-- place, its workload limits, and the nodes and hostnames it has then; a
-- live cluster whose limits change adds the difference.
CREATE FUNCTION organization_usage_clusters() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    came organization_usage_cluster[];
    went organization_usage_cluster[];
    changed organization_usage_cluster[];
BEGIN
    IF TG_OP <> 'DELETE' THEN
        SELECT array_agg((organization_id, id, 1, workload_cpu_limit_milli_cores,
                          workload_memory_limit_mib)::organization_usage_cluster)
        INTO came FROM new_clusters WHERE deleted_at IS NULL;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        SELECT array_agg((organization_id, id, -1, -workload_cpu_limit_milli_cores,
                          -workload_memory_limit_mib)::organization_usage_cluster)
        INTO went FROM old_clusters WHERE deleted_at IS NULL;
    END IF;
    -- Per cluster: +1 when it became live, -1 when it stopped, 0 when it
    -- stayed (then only a change of its limits counts).
    SELECT array_agg((organization_id, id, sign, cpu, memory)::organization_usage_cluster)
    INTO changed
    FROM (SELECT organization_id, id, sum(sign)::bigint AS sign, sum(cpu)::bigint AS cpu,
                 sum(memory)::bigint AS memory
          FROM (SELECT * FROM unnest(came) UNION ALL SELECT * FROM unnest(went)) live
          GROUP BY organization_id, id
          HAVING sum(sign) <> 0 OR sum(cpu) <> 0 OR sum(memory) <> 0) each;
    IF changed IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM organization_usage
    WHERE organization_id IN (SELECT organization_id FROM unnest(changed))
    ORDER BY organization_id FOR UPDATE;
    -- Members counted under the lock, with a fresh snapshot: a node written
    -- meanwhile by a statement that saw this cluster live was added by it.
    WITH summed AS (
        SELECT e.organization_id, sum(e.sign) AS clusters, sum(e.cpu) AS cpu, sum(e.memory) AS memory,
               sum(CASE WHEN e.sign = 0 THEN 0 ELSE e.sign *
                   (SELECT count(*) FROM nodes n
                    WHERE n.cluster_id = e.id AND n.deleted_at IS NULL AND n.status <> 'deleted') END) AS nodes,
               sum(CASE WHEN e.sign = 0 THEN 0 ELSE e.sign *
                   (SELECT count(*) FROM workload_ingress_hostname_bindings b
                    WHERE b.cluster_id = e.id AND b.deleted_at IS NULL) END) AS hostnames
        FROM unnest(changed) e GROUP BY e.organization_id)
    UPDATE organization_usage u
    SET clusters = u.clusters + s.clusters, cpu_milli_cores = u.cpu_milli_cores + s.cpu,
        memory_mib = u.memory_mib + s.memory, nodes = u.nodes + s.nodes,
        hostnames = u.hostnames + s.hostnames
    FROM summed s WHERE u.organization_id = s.organization_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER organization_usage_clusters_inserted AFTER INSERT ON clusters
REFERENCING NEW TABLE AS new_clusters
FOR EACH STATEMENT EXECUTE FUNCTION organization_usage_clusters();
CREATE TRIGGER organization_usage_clusters_updated AFTER UPDATE ON clusters
REFERENCING OLD TABLE AS old_clusters NEW TABLE AS new_clusters
FOR EACH STATEMENT EXECUTE FUNCTION organization_usage_clusters();
CREATE TRIGGER organization_usage_clusters_deleted AFTER DELETE ON clusters
REFERENCING OLD TABLE AS old_clusters
FOR EACH STATEMENT EXECUTE FUNCTION organization_usage_clusters();

CREATE TRIGGER organization_usage_nodes_inserted AFTER INSERT ON nodes
REFERENCING NEW TABLE AS new_nodes
FOR EACH STATEMENT EXECUTE FUNCTION organization_usage_nodes();
CREATE TRIGGER organization_usage_nodes_updated AFTER UPDATE ON nodes
REFERENCING OLD TABLE AS old_nodes NEW TABLE AS new_nodes
FOR EACH STATEMENT EXECUTE FUNCTION organization_usage_nodes();
CREATE TRIGGER organization_usage_nodes_deleted AFTER DELETE ON nodes
REFERENCING OLD TABLE AS old_nodes
FOR EACH STATEMENT EXECUTE FUNCTION organization_usage_nodes();

CREATE TRIGGER organization_usage_hostnames_inserted AFTER INSERT ON workload_ingress_hostname_bindings
REFERENCING NEW TABLE AS new_bindings
FOR EACH STATEMENT EXECUTE FUNCTION organization_usage_hostnames();
CREATE TRIGGER organization_usage_hostnames_updated AFTER UPDATE ON workload_ingress_hostname_bindings
REFERENCING OLD TABLE AS old_bindings NEW TABLE AS new_bindings
FOR EACH STATEMENT EXECUTE FUNCTION organization_usage_hostnames();
CREATE TRIGGER organization_usage_hostnames_deleted AFTER DELETE ON workload_ingress_hostname_bindings
REFERENCING OLD TABLE AS old_bindings
FOR EACH STATEMENT EXECUTE FUNCTION organization_usage_hostnames();

-- Today's counts, under locks that hold every write of the counted tables
-- (and every new organization, whose row the trigger above would not make
-- before this commits) back until the migration commits.
LOCK TABLE organizations, clusters, nodes, workload_ingress_hostname_bindings IN SHARE MODE;
INSERT INTO organization_usage (organization_id, clusters, nodes, cpu_milli_cores, memory_mib, hostnames)
SELECT o.id,
       (SELECT count(*) FROM clusters c WHERE c.organization_id = o.id AND c.deleted_at IS NULL),
       (SELECT count(*) FROM nodes n JOIN clusters c ON c.id = n.cluster_id
        WHERE c.organization_id = o.id AND c.deleted_at IS NULL
          AND n.deleted_at IS NULL AND n.status <> 'deleted'),
       (SELECT coalesce(sum(c.workload_cpu_limit_milli_cores), 0) FROM clusters c
        WHERE c.organization_id = o.id AND c.deleted_at IS NULL),
       (SELECT coalesce(sum(c.workload_memory_limit_mib), 0) FROM clusters c
        WHERE c.organization_id = o.id AND c.deleted_at IS NULL),
       (SELECT count(*) FROM workload_ingress_hostname_bindings b JOIN clusters c ON c.id = b.cluster_id
        WHERE c.organization_id = o.id AND c.deleted_at IS NULL AND b.deleted_at IS NULL)
FROM organizations o;

-- Joins under way, found by their expiry: only those not yet expired are
-- read, however many attempts the fleet has made.
CREATE INDEX idx_join_attempts_joining_expires ON join_attempts (bootstrap_expires_at, cluster_id)
    WHERE outcome = 'joining' AND node_id IS NULL;
