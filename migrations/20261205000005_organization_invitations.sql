-- Invitations into an organisation: by email, with the role the member
-- will have; the link's token is kept only as its hash; single use, and
-- good for a week.
CREATE TABLE organization_invitations (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    organization_id     uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    email               citext NOT NULL CHECK (length(email) BETWEEN 3 AND 320),
    role                text NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
    token_hash          bytea NOT NULL UNIQUE,
    invited_by_user_id  uuid NOT NULL REFERENCES users (id),
    status              text NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'accepted', 'declined', 'revoked')),
    answered_by_user_id uuid REFERENCES users (id),
    expires_at          timestamptz NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
-- One open invitation per address and organisation.
CREATE UNIQUE INDEX idx_organization_invitations_pending
    ON organization_invitations (organization_id, email) WHERE status = 'pending';
CREATE TRIGGER organization_invitations_set_updated_at BEFORE UPDATE ON organization_invitations
    FOR EACH ROW WHEN (OLD.updated_at IS NOT DISTINCT FROM NEW.updated_at)
    EXECUTE FUNCTION set_updated_at();
