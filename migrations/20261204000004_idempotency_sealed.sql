-- Kept answers hold no secret in clear: with KUBEBYON_SETTINGS_KEY set every
-- kept body is sealed (response_sealed); without it an answer that issued a
-- secret is kept without its body, and a retry is told it is not kept.
ALTER TABLE idempotency_keys
    ADD COLUMN response_sealed boolean NOT NULL DEFAULT false,
    DROP CONSTRAINT idempotency_keys_check,
    ADD CONSTRAINT idempotency_keys_answered_has_body
        CHECK (response_status IS NOT NULL OR response_body IS NULL),
    ADD CONSTRAINT idempotency_keys_sealed_has_body
        CHECK (NOT response_sealed OR response_body IS NOT NULL);
