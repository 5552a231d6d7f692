-- Operations accepted while another job of the cluster is active wait as
-- pending operations without a job; the sweep looks them up by this index.
CREATE INDEX idx_cluster_operations_pending
    ON cluster_operations (cluster_id, created_at) WHERE status = 'pending';
