-- Billing belongs to organisations: an order buys a plan for an
-- organisation (the member who placed it stays in `user_id`), the plan's
-- limits count the organisation's clusters, and the organisation is the
-- Stripe customer.
--
-- Every existing order moves to its user's personal organisation, where
-- their clusters already are, so every user's entitlement reads as before.
-- An order inserted without an organisation (code that predates this
-- migration, during a rolling deploy) lands there too.

ALTER TABLE orders ADD COLUMN organization_id uuid REFERENCES organizations (id);
UPDATE orders o SET organization_id = org.id
    FROM organizations org WHERE org.personal_user_id = o.user_id;
ALTER TABLE orders ALTER COLUMN organization_id SET NOT NULL;

CREATE FUNCTION orders_default_organization() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.organization_id IS NULL THEN
        SELECT id INTO NEW.organization_id FROM organizations
            WHERE personal_user_id = NEW.user_id;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER orders_default_organization BEFORE INSERT ON orders
    FOR EACH ROW EXECUTE FUNCTION orders_default_organization();

-- At most one pending order per organisation (it was per user: the same
-- sets, while every order is in its user's personal organisation).
DROP INDEX idx_orders_one_pending_per_user;
CREATE UNIQUE INDEX idx_orders_one_pending_per_organization
    ON orders (organization_id) WHERE status = 'pending';
CREATE INDEX idx_orders_organization_created_at
    ON orders (organization_id, created_at DESC, id DESC);
CREATE INDEX idx_orders_organization_status_paid_at
    ON orders (organization_id, status, paid_at DESC);

-- The Stripe customer an organisation pays as, made at its first checkout.
ALTER TABLE organizations
    ADD COLUMN stripe_customer_id text UNIQUE CHECK (stripe_customer_id ~ '^cus_[A-Za-z0-9]{1,200}$');
