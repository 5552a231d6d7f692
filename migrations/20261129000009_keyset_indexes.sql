-- The newest-first lists page by (created_at, id): their indexes carry the id
-- too, so a page is read in index order and stops at its limit instead of
-- sorting every row of the owner (a user with 10,000 clusters made the first
-- page of the cluster list read all 10,000).
DROP INDEX idx_clusters_owner_user_id_created_at;
CREATE INDEX idx_clusters_owner_user_id_created_at
    ON clusters (owner_user_id, created_at DESC, id DESC) WHERE deleted_at IS NULL;

DROP INDEX idx_cluster_jobs_cluster_created_at;
CREATE INDEX idx_cluster_jobs_cluster_created_at ON cluster_jobs (cluster_id, created_at DESC, id DESC);

DROP INDEX idx_cluster_operations_cluster_created_at;
CREATE INDEX idx_cluster_operations_cluster_created_at
    ON cluster_operations (cluster_id, created_at DESC, id DESC);

DROP INDEX idx_tokens_cluster_created_at;
CREATE INDEX idx_tokens_cluster_created_at ON tokens (cluster_id, created_at DESC, id DESC);

DROP INDEX idx_login_events_user_created_at;
CREATE INDEX idx_login_events_user_created_at ON login_events (user_id, created_at DESC, id DESC);

DROP INDEX idx_join_attempts_cluster_created_at;
CREATE INDEX idx_join_attempts_cluster_created_at ON join_attempts (cluster_id, created_at DESC, id DESC);
