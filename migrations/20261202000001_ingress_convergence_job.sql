-- Installing, following and removing a cluster's managed ingress controller
-- is a job of its own (`ingress_converge`), so every write into a tenant
-- cluster holds the cluster's one active-job slot, a lease and a fence.

ALTER TABLE cluster_operations
    DROP CONSTRAINT cluster_operations_type_check,
    ADD CONSTRAINT cluster_operations_type_check
        CHECK (type IN ('create', 'update', 'delete', 'node_remove', 'ingress_converge'));

ALTER TABLE cluster_jobs
    DROP CONSTRAINT cluster_jobs_type_check,
    ADD CONSTRAINT cluster_jobs_type_check
        CHECK (type IN ('cluster_create', 'cluster_update', 'cluster_delete', 'node_remove',
                        'ingress_converge'));
