-- What Stripe charges for a plan: a Price of the operator's Stripe account,
-- or, without one, the plan's own amount and currency.
ALTER TABLE plans
    ADD COLUMN stripe_price_id text
        CONSTRAINT plans_stripe_price_id_format
        CHECK (stripe_price_id ~ '^price_[A-Za-z0-9]{1,200}$');
