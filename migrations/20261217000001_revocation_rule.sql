-- One rule between issuing a credential and ending what it rests on
-- (shared/src/app/authority.rs): what each credential was issued through
-- is recorded, so ending that ends the credential too.

-- A join token made with an API key names it: revoking the key revokes the
-- tokens it made while they are unused. Its maker's removal, demotion,
-- password change or disabling revokes the tokens they made.
ALTER TABLE tokens ADD COLUMN api_key_id uuid REFERENCES api_keys (id) ON DELETE SET NULL;
CREATE INDEX idx_tokens_active_created_by ON tokens (created_by_user_id) WHERE status = 'active';
CREATE INDEX idx_tokens_active_api_key ON tokens (api_key_id) WHERE status = 'active' AND api_key_id IS NOT NULL;

-- A device sign-in approved but not yet exchanged ends with its approver's
-- credentials (a password changed or reset, the account disabled).
ALTER TABLE device_authorizations DROP CONSTRAINT device_authorizations_status_check;
ALTER TABLE device_authorizations ADD CONSTRAINT device_authorizations_status_check
    CHECK (status IN ('pending', 'approved', 'denied', 'consumed', 'revoked'));
ALTER TABLE device_authorizations DROP CONSTRAINT device_authorizations_check1;
ALTER TABLE device_authorizations ADD CONSTRAINT device_authorizations_decided_has_approver
    CHECK (status NOT IN ('approved', 'consumed', 'revoked')
           OR (user_id IS NOT NULL AND scope IS NOT NULL AND key_lifetime_days IS NOT NULL));
CREATE INDEX idx_device_authorizations_approved_user
    ON device_authorizations (user_id) WHERE status = 'approved';

-- An API key acts only while its maker's account is active: a disabled
-- account's keys, its organisations' keys included, are revoked with it.
UPDATE api_keys k SET revoked_at = now()
FROM users u
WHERE u.id = k.user_id AND u.status = 'disabled' AND k.revoked_at IS NULL;
