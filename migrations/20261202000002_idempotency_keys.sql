-- Idempotency-Key on the console's creating POSTs: the first answer to a
-- user's key is kept for 24 hours and replayed to a retry of the same request.
CREATE TABLE idempotency_keys (
    user_id               uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    key                   text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    -- SHA-256 of the method, path and body: a retry must send the same request.
    request_hash          bytea NOT NULL CHECK (length(request_hash) = 32),
    -- Until the answer is recorded the request is in flight; past this time an
    -- unanswered claim (its process died) may be taken over by a retry.
    in_flight_until       timestamptz NOT NULL,
    response_status       smallint CHECK (response_status BETWEEN 200 AND 499),
    response_content_type text,
    response_body         bytea,
    created_at            timestamptz NOT NULL DEFAULT now(),
    expires_at            timestamptz NOT NULL,
    PRIMARY KEY (user_id, key),
    CHECK ((response_status IS NULL) = (response_body IS NULL))
);
CREATE INDEX idx_idempotency_keys_expires_at ON idempotency_keys (expires_at);
