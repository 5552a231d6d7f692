-- Removing a node is an operation of its cluster, carried out by the
-- `node_remove` job (cordon, drain, delete the Node object). Operations carry
-- their parameters, so one queued behind another job starts with them.

ALTER TABLE cluster_operations
    DROP CONSTRAINT cluster_operations_type_check,
    ADD CONSTRAINT cluster_operations_type_check
        CHECK (type IN ('create', 'update', 'delete', 'node_remove')),
    ADD COLUMN payload jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(payload) = 'object');

ALTER TABLE cluster_jobs
    DROP CONSTRAINT cluster_jobs_type_check,
    ADD CONSTRAINT cluster_jobs_type_check
        CHECK (type IN ('cluster_create', 'cluster_update', 'cluster_delete', 'node_remove'));

-- At most one removal of a node pending or running.
CREATE UNIQUE INDEX idx_cluster_operations_node_removal_active
    ON cluster_operations ((payload ->> 'node_id'))
    WHERE type = 'node_remove' AND status IN ('pending', 'running');
