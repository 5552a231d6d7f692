-- A join token is no longer a bootstrap token of the cluster: each join
-- attempt that takes a use gets a bootstrap token of its own, valid for
-- minutes, whose Secret the attempt records so that the node sync deletes it
-- once the attempt has ended. A join token's holder can therefore never join
-- more machines than its uses allow by calling the control plane directly.
ALTER TABLE join_attempts
    ADD COLUMN bootstrap_secret_name text CHECK (bootstrap_secret_name ~ '^bootstrap-token-[a-z0-9]{6}$'),
    ADD COLUMN bootstrap_expires_at timestamptz,
    ADD COLUMN bootstrap_secret_deleted_at timestamptz,
    ADD CONSTRAINT join_attempts_bootstrap_expiry CHECK ((bootstrap_secret_name IS NULL) = (bootstrap_expires_at IS NULL));
CREATE INDEX idx_join_attempts_bootstrap_secret_pending ON join_attempts (cluster_id)
    WHERE bootstrap_secret_name IS NOT NULL AND bootstrap_secret_deleted_at IS NULL;
