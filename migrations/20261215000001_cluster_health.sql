-- A cluster's health at a glance: its control plane's state and its live
-- nodes, rolled up once here for every reader (the API's cluster
-- resource, its `health` filter, the back office). See
-- docs/decisions/2026-12-07-a-cluster-says-its-health.md.
--
-- Each row counts one cluster's nodes through idx_nodes_cluster_deleted_at:
-- a read of a page of clusters counts that page's nodes alone.
CREATE VIEW cluster_health AS
SELECT c.id AS cluster_id,
       n.total AS nodes_total,
       n.ready AS nodes_ready,
       n.not_ready AS nodes_not_ready,
       n.offline AS nodes_offline,
       n.pending AS nodes_pending,
       CASE
           WHEN c.status IN ('pending', 'provisioning', 'updating', 'deleting') THEN 'in_progress'
           WHEN c.status = 'failed' THEN 'failed'
           WHEN c.status = 'deleted' THEN 'deleted'
           WHEN c.connection_status = 'unreachable' THEN 'unreachable'
           WHEN n.total = 0 THEN 'no_nodes'
           WHEN n.not_ready + n.offline > 0 THEN 'degraded'
           ELSE 'healthy'
       END AS health
FROM clusters c
CROSS JOIN LATERAL (
    SELECT count(*) AS total,
           count(*) FILTER (WHERE status = 'ready') AS ready,
           count(*) FILTER (WHERE status = 'not_ready') AS not_ready,
           count(*) FILTER (WHERE status = 'offline') AS offline,
           count(*) FILTER (WHERE status = 'pending') AS pending
    FROM nodes
    WHERE cluster_id = c.id AND deleted_at IS NULL AND status <> 'deleted'
) n;
