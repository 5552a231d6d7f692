-- Accounts: revocable API keys, and the counters behind rate limits.

ALTER TABLE api_keys ADD COLUMN revoked_at timestamptz;
CREATE INDEX idx_api_keys_active ON api_keys (token_hash) WHERE revoked_at IS NULL;

-- Fixed-window counters: one row per limited key (e.g. `login:ip:203.0.113.7`)
-- and window; old windows are pruned by the sweep.
CREATE TABLE rate_limit_hits (
    bucket       text NOT NULL CHECK (length(bucket) <= 400),
    window_start timestamptz NOT NULL,
    hits         integer NOT NULL CHECK (hits >= 0),
    PRIMARY KEY (bucket, window_start)
);
CREATE INDEX idx_rate_limit_hits_window_start ON rate_limit_hits (window_start);
