-- API keys for automation that belong to an organisation: such a key acts
-- in its organisation alone, with the role it was given (never owner), and
-- outlives its maker's membership. `user_id` stays the member who made it.
ALTER TABLE api_keys
    ADD COLUMN organization_id uuid REFERENCES organizations (id) ON DELETE CASCADE,
    ADD COLUMN organization_role text CHECK (organization_role IN ('admin', 'member', 'viewer')),
    ADD CONSTRAINT api_keys_organization_role
        CHECK ((organization_id IS NULL) = (organization_role IS NULL));
CREATE INDEX idx_api_keys_organization_created_at
    ON api_keys (organization_id, created_at DESC) WHERE organization_id IS NOT NULL;
