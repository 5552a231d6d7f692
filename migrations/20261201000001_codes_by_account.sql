-- Email codes belong to an account, not to a typed address: a code is looked up
-- by the account's id and mailed to the address the account has stored.
ALTER TABLE email_verification_codes
    ADD COLUMN user_id uuid REFERENCES users (id) ON DELETE CASCADE;
UPDATE email_verification_codes c SET user_id = u.id FROM users u WHERE u.email = c.email;
DELETE FROM email_verification_codes WHERE user_id IS NULL;
ALTER TABLE email_verification_codes ALTER COLUMN user_id SET NOT NULL;

DROP INDEX idx_email_verification_codes_active;
-- One live code per account and purpose.
CREATE UNIQUE INDEX idx_email_verification_codes_active
    ON email_verification_codes (user_id, purpose) WHERE consumed_at IS NULL;

-- Stored addresses in their canonical form: ASCII ones lowercased (a non-ASCII
-- one is left as it is: it can no longer be typed, so that account
-- logs in only through a linked OAuth identity).
UPDATE users SET email = lower(email::text)
WHERE email::text ~ '^[\x21-\x7e]+$' AND email::text <> lower(email::text);
