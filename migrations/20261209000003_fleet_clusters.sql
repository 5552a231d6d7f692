-- The back office's list of every live cluster, newest first, and of those
-- in one status: an index walk of the clusters it lists.
CREATE INDEX idx_clusters_created_at ON clusters (created_at DESC, id DESC)
    WHERE deleted_at IS NULL;
CREATE INDEX idx_clusters_status_created_at ON clusters (status, created_at DESC, id DESC)
    WHERE deleted_at IS NULL;

-- Found by a part of the name (`?q=`, `LIKE '%…%'`): a trigram index where
-- pg_trgm is there (20261208000002), else along the walk by time.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        CREATE INDEX idx_clusters_name_trgm ON clusters USING gin (name gin_trgm_ops)
            WHERE deleted_at IS NULL;
    END IF;
END
$$;
