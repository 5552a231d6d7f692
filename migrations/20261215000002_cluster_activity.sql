-- A cluster's activity (GET /api/console/clusters/{id}/activity): its
-- audit events newest first, an index range.
CREATE INDEX idx_audit_events_cluster_id ON audit_events (cluster_id, id DESC)
    WHERE cluster_id IS NOT NULL;
