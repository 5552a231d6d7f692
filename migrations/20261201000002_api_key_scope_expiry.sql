-- API keys carry a scope and an expiry. Existing keys keep writing and expire
-- 90 days from now, so none lives forever.
ALTER TABLE api_keys
    ADD COLUMN scope text NOT NULL DEFAULT 'write' CHECK (scope IN ('read', 'write')),
    ADD COLUMN expires_at timestamptz;
UPDATE api_keys SET expires_at = now() + interval '90 days' WHERE expires_at IS NULL;
ALTER TABLE api_keys
    ALTER COLUMN expires_at SET NOT NULL,
    ALTER COLUMN scope DROP DEFAULT;
