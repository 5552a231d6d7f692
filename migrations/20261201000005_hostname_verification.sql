-- Self-managed hostnames are claimed only with proof: a DNS TXT record
-- `_kubebyon-challenge.<hostname>` holding `kubebyon-verification=<token>`.
-- Until then a binding is a claim of its cluster alone: it does not hold the
-- name against other clusters, is not observed, and gets no certificate
-- state. Platform-managed names (under the base domain) are the platform's
-- to give, and verified when bound.
ALTER TABLE workload_ingress_hostname_bindings
    ADD COLUMN verification_token text CHECK (verification_token ~ '^[a-z0-9]{32}$'),
    ADD COLUMN verified_at timestamptz,
    ADD COLUMN verification_checked_at timestamptz,
    ADD COLUMN verification_message text CHECK (length(verification_message) <= 1000);
UPDATE workload_ingress_hostname_bindings SET verified_at = created_at
    WHERE dns_management_scope = 'platform_managed';
UPDATE workload_ingress_hostname_bindings SET verification_token = replace(gen_random_uuid()::text, '-', '')
    WHERE dns_management_scope = 'self_managed';
ALTER TABLE workload_ingress_hostname_bindings
    ADD CONSTRAINT bindings_self_managed_have_a_challenge
        CHECK (dns_management_scope = 'platform_managed' OR verification_token IS NOT NULL),
    ADD CONSTRAINT bindings_platform_managed_are_verified
        CHECK (dns_management_scope = 'self_managed' OR verified_at IS NOT NULL);

-- A name is held by its one verified binding; unverified claims may be many,
-- one per cluster.
DROP INDEX idx_workload_ingress_hostname_bindings_hostname;
CREATE UNIQUE INDEX idx_workload_ingress_hostname_bindings_hostname
    ON workload_ingress_hostname_bindings (hostname) WHERE deleted_at IS NULL AND verified_at IS NOT NULL;
CREATE UNIQUE INDEX idx_workload_ingress_hostname_bindings_cluster_hostname
    ON workload_ingress_hostname_bindings (cluster_id, hostname) WHERE deleted_at IS NULL;
CREATE INDEX idx_workload_ingress_hostname_bindings_unverified
    ON workload_ingress_hostname_bindings (verification_checked_at NULLS FIRST)
    WHERE deleted_at IS NULL AND verified_at IS NULL;
