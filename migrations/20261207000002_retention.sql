-- Histories pruned by age in bounded batches (`shared::app::retention`,
-- run by `sweep`; metrics by `sync-metrics`): each batch takes the oldest
-- rows through an index on their time, instead of scanning the table.
CREATE INDEX idx_node_events_observed_at ON node_events (observed_at);
CREATE INDEX idx_login_events_created_at ON login_events (created_at);
CREATE INDEX idx_cluster_jobs_finished_at ON cluster_jobs (finished_at)
    WHERE status IN ('succeeded', 'failed', 'cancelled');
CREATE INDEX idx_control_plane_metrics_collected_at ON control_plane_metrics_snapshots (collected_at);

-- A cluster's metrics over a range read from the index alone: its rows
-- lie on as many heap pages as there are samples (every cluster's samples
-- are written side by side), so reading them from the heap cost a page
-- each.
DROP INDEX idx_control_plane_metrics_cluster_collected_at;
CREATE INDEX idx_control_plane_metrics_cluster_collected_at
    ON control_plane_metrics_snapshots (cluster_id, collected_at DESC)
    INCLUDE (available, total_cpu_percent, total_memory_rss_bytes, total_memory_virtual_bytes,
             load_average_1);
