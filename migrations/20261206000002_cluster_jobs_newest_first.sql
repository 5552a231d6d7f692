-- The back office's job list, newest first, all of them or by status: an
-- index in that order for each (by cluster, idx_cluster_jobs_cluster_created_at
-- already gives it), instead of a scan and sort of every job.
CREATE INDEX idx_cluster_jobs_created_at ON cluster_jobs (created_at DESC, id DESC);
DROP INDEX idx_cluster_jobs_status_created_at;
CREATE INDEX idx_cluster_jobs_status_created_at ON cluster_jobs (status, created_at DESC, id DESC);
