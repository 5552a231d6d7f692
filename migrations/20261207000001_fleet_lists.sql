-- Lists that stay one page deep at fleet scale: each list statement's
-- filter and keyset cursor are index conditions of an index in its order,
-- so no page reads rows of other owners or rows before the cursor.

-- Audit events page by id, newest first (the cursor is the last id), by
-- actor or for everyone (the primary key).
DROP INDEX idx_audit_events_actor_created_at;
CREATE INDEX idx_audit_events_actor_id ON audit_events (actor_user_id, id DESC);

-- The organization an audit event belongs to, kept by a trigger on insert:
-- the organization it targets, the organization of the order it targets,
-- else the organization of its cluster. An organization's activity is then
-- one index range instead of a search of every event by target and cluster.
ALTER TABLE audit_events ADD COLUMN organization_id uuid;

CREATE FUNCTION uuid_or_null(text) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN $1 ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN $1::uuid END;

CREATE FUNCTION audit_events_organization() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.organization_id IS NULL THEN
        NEW.organization_id := CASE NEW.target_kind
            WHEN 'organization' THEN
                (SELECT id FROM organizations WHERE id = uuid_or_null(NEW.target_id))
            WHEN 'order' THEN
                (SELECT organization_id FROM orders WHERE id = uuid_or_null(NEW.target_id))
        END;
    END IF;
    IF NEW.organization_id IS NULL AND NEW.cluster_id IS NOT NULL THEN
        NEW.organization_id := (SELECT organization_id FROM clusters WHERE id = NEW.cluster_id);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER audit_events_organization BEFORE INSERT ON audit_events
FOR EACH ROW EXECUTE FUNCTION audit_events_organization();

UPDATE audit_events a SET organization_id = o.id
FROM organizations o
WHERE a.target_kind = 'organization' AND o.id = uuid_or_null(a.target_id);
UPDATE audit_events a SET organization_id = o.organization_id
FROM orders o
WHERE a.target_kind = 'order' AND o.id = uuid_or_null(a.target_id);
UPDATE audit_events a SET organization_id = c.organization_id
FROM clusters c
WHERE a.organization_id IS NULL AND c.id = a.cluster_id;

CREATE INDEX idx_audit_events_organization_id ON audit_events (organization_id, id DESC)
    WHERE organization_id IS NOT NULL;

-- Orders newest first: all of them, by status, by user, by organization
-- (idx_orders_organization_created_at), each ending in id for the cursor.
CREATE INDEX idx_orders_created_at ON orders (created_at DESC, id DESC);
CREATE INDEX idx_orders_status_created_at ON orders (status, created_at DESC, id DESC);
DROP INDEX idx_orders_user_created_at;
CREATE INDEX idx_orders_user_created_at ON orders (user_id, created_at DESC, id DESC);

-- Live users newest first.
CREATE INDEX idx_users_created_at ON users (created_at DESC, id DESC) WHERE deleted_at IS NULL;

-- The host access backfill walks the clusters lacking access in the order
-- of this index, stopping at its batch.
DROP INDEX idx_clusters_host_access_revision;
CREATE INDEX idx_clusters_host_access_revision ON clusters (host_access_revision, id)
    WHERE deleted_at IS NULL;
