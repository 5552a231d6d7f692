-- Kubeconfig credentials: each kubeconfig a user downloads carries a token of
-- a ServiceAccount of its own inside the cluster (bound to cluster-admin),
-- issued by the TokenRequest API with an expiry. Deleting the ServiceAccount
-- revokes the token; `removed_at` records that it is gone.
CREATE TABLE kubeconfig_credentials (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    cluster_id uuid NOT NULL REFERENCES clusters (id) ON DELETE CASCADE,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    service_account_name text NOT NULL,
    description text CHECK (char_length(description) <= 200),
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz,
    revoked_by_user_id uuid REFERENCES users (id) ON DELETE SET NULL,
    -- Why it was revoked: `user`, `user_disabled`, `issue_failed`.
    revoke_reason text CHECK (revoke_reason IN ('user', 'user_disabled', 'issue_failed')),
    removed_at timestamptz,
    ip inet,
    user_agent text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((revoked_at IS NULL) = (revoke_reason IS NULL))
);
CREATE INDEX idx_kubeconfig_credentials_cluster_created_at
    ON kubeconfig_credentials (cluster_id, created_at DESC, id DESC);
CREATE INDEX idx_kubeconfig_credentials_user_live
    ON kubeconfig_credentials (user_id) WHERE revoked_at IS NULL;
-- What the cluster sync still has to delete inside the clusters.
CREATE INDEX idx_kubeconfig_credentials_to_remove
    ON kubeconfig_credentials (cluster_id) WHERE removed_at IS NULL;
CREATE TRIGGER kubeconfig_credentials_set_updated_at BEFORE UPDATE ON kubeconfig_credentials
    FOR EACH ROW WHEN (OLD.updated_at IS NOT DISTINCT FROM NEW.updated_at)
    EXECUTE FUNCTION set_updated_at();
