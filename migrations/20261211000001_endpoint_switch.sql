-- Switching a cluster's endpoint (a change of public access mode, or of the
-- address its mode gives) keeps the old address serving for a grace period:
-- the cluster records the address it had, the mode that served it and until
-- when. The `endpoint_retire` job removes the old entry once that time has
-- passed (sync-clusters enqueues it).
ALTER TABLE clusters
    ADD COLUMN previous_api_endpoint text CHECK (char_length(previous_api_endpoint) <= 2048),
    ADD COLUMN previous_public_access_mode text
        CHECK (previous_public_access_mode IN ('nodeport', 'loadbalancer')),
    ADD COLUMN previous_endpoint_until timestamptz,
    ADD CONSTRAINT clusters_previous_endpoint_whole CHECK (
        (previous_api_endpoint IS NULL) = (previous_public_access_mode IS NULL)
        AND (previous_api_endpoint IS NULL) = (previous_endpoint_until IS NULL));

CREATE INDEX idx_clusters_previous_endpoint_until ON clusters (previous_endpoint_until)
    WHERE previous_endpoint_until IS NOT NULL;

ALTER TABLE cluster_operations
    DROP CONSTRAINT cluster_operations_type_check,
    ADD CONSTRAINT cluster_operations_type_check
        CHECK (type IN ('create', 'update', 'delete', 'node_remove', 'ingress_converge',
                        'endpoint_retire'));

ALTER TABLE cluster_jobs
    DROP CONSTRAINT cluster_jobs_type_check,
    ADD CONSTRAINT cluster_jobs_type_check
        CHECK (type IN ('cluster_create', 'cluster_update', 'cluster_delete', 'node_remove',
                        'ingress_converge', 'endpoint_retire'));

-- A switch whose new address does not answer as the cluster fails with
-- `endpoint_unreachable`.
ALTER TABLE cluster_jobs
    DROP CONSTRAINT cluster_jobs_error_code_check,
    ADD CONSTRAINT cluster_jobs_error_code_check CHECK (error_code IN (
        'host_unreachable', 'host_rejected', 'quota_exceeded', 'chart_install_failed',
        'ingress_install_failed', 'timeout', 'drain_timeout', 'cluster_not_ready',
        'cluster_deleted', 'invalid_configuration', 'worker_lost', 'cancelled', 'internal',
        'endpoint_unreachable'));
ALTER TABLE cluster_operations
    DROP CONSTRAINT cluster_operations_error_code_check,
    ADD CONSTRAINT cluster_operations_error_code_check CHECK (error_code IN (
        'host_unreachable', 'host_rejected', 'quota_exceeded', 'chart_install_failed',
        'ingress_install_failed', 'timeout', 'drain_timeout', 'cluster_not_ready',
        'cluster_deleted', 'invalid_configuration', 'worker_lost', 'cancelled', 'internal',
        'endpoint_unreachable'));

-- The owner hears that the cluster's address moved (`cluster.endpoint_changed`).
ALTER TABLE notification_outbox
    DROP CONSTRAINT notification_outbox_kind_check,
    ADD CONSTRAINT notification_outbox_kind_check
        CHECK (kind IN ('cluster_ready', 'cluster_failed', 'node_offline', 'node_joined',
                        'order_paid', 'plan_limit_reached', 'cluster_endpoint_changed'));
