-- Billing: the plan users without a paid order have, Stripe's credentials,
-- the events Stripe sent (each processed once), and what an order needs to
-- answer a retried checkout with the same session.
ALTER TABLE system_settings
    ADD COLUMN default_plan_id uuid REFERENCES plans (id),
    ADD COLUMN stripe_api_base_url text,
    ADD COLUMN stripe_secret_key_encrypted bytea,
    ADD COLUMN stripe_webhook_secret_encrypted bytea;

-- An order an administrator cancels after it was paid (a refund) keeps its
-- paid_at; a pending order has neither time.
ALTER TABLE orders
    DROP CONSTRAINT orders_check,
    ADD CONSTRAINT orders_paid_at CHECK (status <> 'paid' OR paid_at IS NOT NULL),
    ADD CONSTRAINT orders_pending_unsettled CHECK (status <> 'pending' OR (paid_at IS NULL AND cancelled_at IS NULL)),
    ADD COLUMN stripe_checkout_url text CHECK (length(stripe_checkout_url) <= 2000),
    ADD COLUMN cancel_reason text CHECK (cancel_reason IN ('user', 'admin', 'expired'));
-- At most one pending order per user: a second choice replaces nothing
-- silently, it is refused until the first is paid or cancelled.
CREATE UNIQUE INDEX idx_orders_one_pending_per_user ON orders (user_id) WHERE status = 'pending';

CREATE TABLE stripe_events (
    id          text PRIMARY KEY CHECK (id ~ '^evt_[A-Za-z0-9_]{1,200}$'),
    type        text NOT NULL CHECK (length(type) <= 200),
    order_id    uuid REFERENCES orders (id) ON DELETE SET NULL,
    -- What processing it did: changed an order, found nothing to change, or
    -- was a type the platform does not handle.
    outcome     text NOT NULL CHECK (outcome IN ('applied', 'no_change', 'ignored')),
    received_at timestamptz NOT NULL DEFAULT now()
);
