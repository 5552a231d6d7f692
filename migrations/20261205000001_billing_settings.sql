-- Billing's settings leave the platform's one settings row for a row of
-- billing's own: the default plan, Stripe's API base and the two Stripe
-- secrets (sealed as before: the column names, which are the sealed values'
-- associated data, are unchanged).
CREATE TABLE billing_settings (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    default_plan_id uuid REFERENCES plans (id),
    stripe_api_base_url text,
    stripe_secret_key_encrypted bytea,
    stripe_webhook_secret_encrypted bytea,
    updated_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO billing_settings (id, default_plan_id, stripe_api_base_url,
                              stripe_secret_key_encrypted, stripe_webhook_secret_encrypted)
SELECT true, default_plan_id, stripe_api_base_url, stripe_secret_key_encrypted, stripe_webhook_secret_encrypted
FROM system_settings WHERE id;

INSERT INTO billing_settings (id) VALUES (true) ON CONFLICT (id) DO NOTHING;

CREATE TRIGGER billing_settings_set_updated_at BEFORE UPDATE ON billing_settings
    FOR EACH ROW WHEN (OLD.updated_at IS NOT DISTINCT FROM NEW.updated_at)
    EXECUTE FUNCTION set_updated_at();

ALTER TABLE system_settings
    DROP COLUMN default_plan_id,
    DROP COLUMN stripe_api_base_url,
    DROP COLUMN stripe_secret_key_encrypted,
    DROP COLUMN stripe_webhook_secret_encrypted;
