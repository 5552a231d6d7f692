-- Tenant databases count against the plan (docs/databases.md): each plan
-- says how many an organisation may have (`max_databases`; existing plans
-- get 0 until an administrator raises it, since each database takes room
-- on a server the operator runs), and `organization_usage` keeps how many
-- it has, as it keeps its nodes and hostnames: the records not forgotten
-- (`deleted_at` NULL, whatever their phase: one being walked or removed
-- still holds its place) of its live clusters.

ALTER TABLE plans ADD COLUMN max_databases integer NOT NULL DEFAULT 0 CHECK (max_databases >= 0);
ALTER TABLE organization_usage ADD COLUMN databases bigint NOT NULL DEFAULT 0 CHECK (databases >= 0);

-- As in 20261208000001, with `databases` among the members counted.
CREATE OR REPLACE FUNCTION organization_usage_add_members(gained uuid[], lost uuid[], what text)
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
        hostnames = u.hostnames + CASE WHEN what = 'hostnames' THEN s.delta ELSE 0 END,
        databases = u.databases + CASE WHEN what = 'databases' THEN s.delta ELSE 0 END
    FROM summed s
    WHERE u.organization_id = s.organization_id AND s.delta <> 0;
END
$$;

-- Most writes of a record change its phase only: their gained and lost
-- cancel out, and nothing is locked.
CREATE FUNCTION organization_usage_databases() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    gained uuid[];
    lost uuid[];
BEGIN
    IF TG_OP <> 'DELETE' THEN
        SELECT array_agg(cluster_id) INTO gained FROM new_databases WHERE deleted_at IS NULL;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        SELECT array_agg(cluster_id) INTO lost FROM old_databases WHERE deleted_at IS NULL;
    END IF;
    PERFORM organization_usage_add_members(gained, lost, 'databases');
    RETURN NULL;
END
$$;

CREATE TRIGGER organization_usage_databases_inserted AFTER INSERT ON tenant_databases
REFERENCING NEW TABLE AS new_databases
FOR EACH STATEMENT EXECUTE FUNCTION organization_usage_databases();
CREATE TRIGGER organization_usage_databases_updated AFTER UPDATE ON tenant_databases
REFERENCING OLD TABLE AS old_databases NEW TABLE AS new_databases
FOR EACH STATEMENT EXECUTE FUNCTION organization_usage_databases();
CREATE TRIGGER organization_usage_databases_deleted AFTER DELETE ON tenant_databases
REFERENCING OLD TABLE AS old_databases
FOR EACH STATEMENT EXECUTE FUNCTION organization_usage_databases();

-- As in 20261208000001, with a cluster's databases coming and going with
-- it.
CREATE OR REPLACE FUNCTION organization_usage_clusters() RETURNS trigger
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
    WITH summed AS (
        SELECT e.organization_id, sum(e.sign) AS clusters, sum(e.cpu) AS cpu, sum(e.memory) AS memory,
               sum(CASE WHEN e.sign = 0 THEN 0 ELSE e.sign *
                   (SELECT count(*) FROM nodes n
                    WHERE n.cluster_id = e.id AND n.deleted_at IS NULL AND n.status <> 'deleted') END) AS nodes,
               sum(CASE WHEN e.sign = 0 THEN 0 ELSE e.sign *
                   (SELECT count(*) FROM workload_ingress_hostname_bindings b
                    WHERE b.cluster_id = e.id AND b.deleted_at IS NULL) END) AS hostnames,
               sum(CASE WHEN e.sign = 0 THEN 0 ELSE e.sign *
                   (SELECT count(*) FROM tenant_databases d
                    WHERE d.cluster_id = e.id AND d.deleted_at IS NULL) END) AS databases
        FROM unnest(changed) e GROUP BY e.organization_id)
    UPDATE organization_usage u
    SET clusters = u.clusters + s.clusters, cpu_milli_cores = u.cpu_milli_cores + s.cpu,
        memory_mib = u.memory_mib + s.memory, nodes = u.nodes + s.nodes,
        hostnames = u.hostnames + s.hostnames, databases = u.databases + s.databases
    FROM summed s WHERE u.organization_id = s.organization_id;
    RETURN NULL;
END
$$;

-- Today's counts, with the records and the clusters held still until the
-- migration commits.
LOCK TABLE clusters, tenant_databases IN SHARE MODE;
UPDATE organization_usage u
SET databases = (SELECT count(*) FROM tenant_databases d JOIN clusters c ON c.id = d.cluster_id
                 WHERE c.organization_id = u.organization_id AND c.deleted_at IS NULL
                   AND d.deleted_at IS NULL);
