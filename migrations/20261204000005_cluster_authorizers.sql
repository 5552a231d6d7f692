-- The platform's authorizer inside each cluster: the bearer token its API
-- server presents to the platform's webhook (from a host Secret the tenant
-- cannot reach), stored hashed. One per cluster; replaced when the Secret
-- is made again.
CREATE TABLE cluster_authorizers (
    cluster_id  uuid PRIMARY KEY REFERENCES clusters (id) ON DELETE CASCADE,
    token_hash  bytea NOT NULL CHECK (length(token_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER cluster_authorizers_set_updated_at BEFORE UPDATE ON cluster_authorizers
    FOR EACH ROW WHEN (OLD.updated_at IS NOT DISTINCT FROM NEW.updated_at)
    EXECUTE FUNCTION set_updated_at();
