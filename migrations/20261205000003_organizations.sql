-- Organisations own clusters; people are their members with a role.
--
-- Every user has a personal organisation (made with the user, whatever code
-- inserts the row), so one person's clusters are the one-member case. The
-- backfill below gives every existing user theirs and moves every cluster
-- into its owner's; a cluster inserted without an organisation (code that
-- predates this migration, during a rolling deploy) lands in its owner's
-- personal organisation too. Nothing is locked for longer than the update
-- of the clusters table.

CREATE TABLE organizations (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name             text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    -- The user whose personal organisation this is; NULL for a shared one.
    personal_user_id uuid UNIQUE REFERENCES users (id),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER organizations_set_updated_at BEFORE UPDATE ON organizations
    FOR EACH ROW WHEN (OLD.updated_at IS NOT DISTINCT FROM NEW.updated_at)
    EXECUTE FUNCTION set_updated_at();

CREATE TABLE organization_members (
    organization_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id         uuid NOT NULL REFERENCES users (id),
    role            text NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, user_id)
);
CREATE INDEX idx_organization_members_user_id ON organization_members (user_id);
CREATE TRIGGER organization_members_set_updated_at BEFORE UPDATE ON organization_members
    FOR EACH ROW WHEN (OLD.updated_at IS NOT DISTINCT FROM NEW.updated_at)
    EXECUTE FUNCTION set_updated_at();

-- A new user's personal organisation, with them as its owner.
CREATE FUNCTION create_personal_organization() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    organization uuid;
BEGIN
    INSERT INTO organizations (name, personal_user_id)
        VALUES (left(NEW.display_name, 100), NEW.id)
        RETURNING id INTO organization;
    INSERT INTO organization_members (organization_id, user_id, role)
        VALUES (organization, NEW.id, 'owner');
    RETURN NEW;
END $$;
CREATE TRIGGER users_create_personal_organization AFTER INSERT ON users
    FOR EACH ROW EXECUTE FUNCTION create_personal_organization();

INSERT INTO organizations (name, personal_user_id)
    SELECT left(display_name, 100), id FROM users;
INSERT INTO organization_members (organization_id, user_id, role)
    SELECT id, personal_user_id, 'owner' FROM organizations;

ALTER TABLE clusters ADD COLUMN organization_id uuid REFERENCES organizations (id);
UPDATE clusters c SET organization_id = o.id
    FROM organizations o WHERE o.personal_user_id = c.owner_user_id;
ALTER TABLE clusters ALTER COLUMN organization_id SET NOT NULL;
CREATE INDEX idx_clusters_organization_id_created_at
    ON clusters (organization_id, created_at DESC, id DESC) WHERE deleted_at IS NULL;

-- A cluster inserted without an organisation belongs to its owner's
-- personal one.
CREATE FUNCTION clusters_default_organization() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.organization_id IS NULL THEN
        SELECT id INTO NEW.organization_id FROM organizations
            WHERE personal_user_id = NEW.owner_user_id;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER clusters_default_organization BEFORE INSERT ON clusters
    FOR EACH ROW EXECUTE FUNCTION clusters_default_organization();

-- Names are unique among an organisation's live clusters (they were per
-- owner: the same sets, while every cluster is in its owner's personal one).
DROP INDEX idx_clusters_owner_name_active;
CREATE UNIQUE INDEX idx_clusters_organization_name_active
    ON clusters (organization_id, name) WHERE deleted_at IS NULL;
