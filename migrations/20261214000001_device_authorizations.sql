-- Sign-in from a terminal: the OAuth 2.0 Device Authorization Grant
-- (RFC 8628). A device asks for a pair of codes; its user approves the short
-- one in the console; the device exchanges the long one, once, for an API
-- key made then. Neither code is kept in clear, only their SHA-256.
CREATE TABLE device_authorizations (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    device_code_hash bytea NOT NULL UNIQUE,
    user_code_hash bytea NOT NULL,
    client_id text NOT NULL CHECK (char_length(client_id) BETWEEN 1 AND 64),
    -- What the device calls itself (its host name), shown to the approver
    -- and put in the key's name.
    device_name text NOT NULL CHECK (char_length(device_name) BETWEEN 1 AND 64),
    status text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'approved', 'denied', 'consumed')),
    ip inet,
    user_agent text CHECK (char_length(user_agent) <= 300),
    -- Seconds the device waits between polls; raised by 5 at each poll
    -- that comes sooner (RFC 8628 section 3.5, slow_down).
    interval_seconds integer NOT NULL CHECK (interval_seconds BETWEEN 1 AND 60),
    last_polled_at timestamptz,
    -- Who decided, and what the key they approved may do.
    user_id uuid REFERENCES users (id) ON DELETE CASCADE,
    scope text CHECK (scope IN ('read', 'write')),
    key_lifetime_days integer CHECK (key_lifetime_days BETWEEN 1 AND 365),
    decided_at timestamptz,
    api_key_id uuid REFERENCES api_keys (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    CHECK ((status = 'pending') = (decided_at IS NULL)),
    CHECK (status NOT IN ('approved', 'consumed')
           OR (user_id IS NOT NULL AND scope IS NOT NULL AND key_lifetime_days IS NOT NULL)),
    CHECK (status = 'consumed' OR api_key_id IS NULL)
);
-- A user code names one pending request at most.
CREATE UNIQUE INDEX idx_device_authorizations_pending_user_code
    ON device_authorizations (user_code_hash) WHERE status = 'pending';
CREATE INDEX idx_device_authorizations_expires_at ON device_authorizations (expires_at);

-- kubectl credentials that renew themselves: an `exec` credential is the
-- ServiceAccount `kubebyon credential` asks short-lived tokens for, bound
-- to the API key that asked; revoking the key revokes it.
ALTER TABLE kubeconfig_credentials
    ADD COLUMN kind text NOT NULL DEFAULT 'download' CHECK (kind IN ('download', 'exec')),
    ADD COLUMN api_key_id uuid REFERENCES api_keys (id) ON DELETE SET NULL;
CREATE INDEX idx_kubeconfig_credentials_key_live
    ON kubeconfig_credentials (api_key_id, cluster_id) WHERE api_key_id IS NOT NULL AND revoked_at IS NULL;
ALTER TABLE kubeconfig_credentials DROP CONSTRAINT kubeconfig_credentials_revoke_reason_check;
ALTER TABLE kubeconfig_credentials ADD CONSTRAINT kubeconfig_credentials_revoke_reason_check
    CHECK (revoke_reason IN ('user', 'user_disabled', 'password_changed', 'issue_failed',
                             'removed_from_organization', 'role_changed', 'api_key_revoked'));
