-- DNS automation: where cluster CNAMEs point, and how each hostname binding's
-- DNS is managed. Deleted bindings stay until their record is gone.

ALTER TABLE system_settings
    ADD COLUMN managed_workload_ingress_edge_target text;

ALTER TABLE workload_ingress_hostname_bindings
    ADD COLUMN dns_management_scope text NOT NULL DEFAULT 'self_managed'
        CHECK (dns_management_scope IN ('platform_managed', 'self_managed')),
    ADD COLUMN dns_management_status text NOT NULL DEFAULT 'pending'
        CHECK (dns_management_status IN ('pending', 'synced', 'error', 'resolves', 'not_resolving', 'mismatch')),
    ADD COLUMN dns_management_message text,
    ADD COLUMN dns_management_last_success_at timestamptz,
    ADD COLUMN deleted_at timestamptz;

DROP INDEX idx_workload_ingress_hostname_bindings_hostname;
CREATE UNIQUE INDEX idx_workload_ingress_hostname_bindings_hostname
    ON workload_ingress_hostname_bindings (hostname) WHERE deleted_at IS NULL;
