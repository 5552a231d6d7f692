-- Join tokens: labels for the nodes they join, the state of their bootstrap
-- Secret inside the vCluster, a ledger of join attempts with the steps the join
-- script reported, and the notification outbox node events feed.

ALTER TABLE tokens
    ADD COLUMN description text CHECK (length(description) <= 200),
    ADD COLUMN node_labels jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(node_labels) = 'object'),
    ADD COLUMN bootstrap_secret_deleted_at timestamptz,
    ADD CONSTRAINT tokens_used_means_exhausted CHECK (status <> 'used' OR (use_count = max_uses AND used_at IS NOT NULL)),
    ADD CONSTRAINT tokens_active_means_uses_left CHECK (status <> 'active' OR use_count < max_uses);
CREATE INDEX idx_tokens_expiring ON tokens (expires_at) WHERE status = 'active';
CREATE INDEX idx_tokens_bootstrap_secret_pending ON tokens (cluster_id)
    WHERE status <> 'active' AND bootstrap_secret_deleted_at IS NULL;

CREATE TABLE join_attempts (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    token_id    uuid NOT NULL REFERENCES tokens (id),
    cluster_id  uuid NOT NULL REFERENCES clusters (id),
    source_ip   inet,
    user_agent  text CHECK (length(user_agent) <= 300),
    hostname    text CHECK (length(hostname) <= 253),
    -- refused: the token could not be used; started: the script was served;
    -- joining: a use of the token was taken and the node is joining.
    outcome     text NOT NULL CHECK (outcome IN ('refused', 'started', 'joining', 'succeeded', 'failed')),
    reason      text,
    counted_use boolean NOT NULL DEFAULT false,
    node_id     uuid REFERENCES nodes (id),
    finished_at timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((outcome IN ('refused', 'succeeded', 'failed')) = (finished_at IS NOT NULL)),
    CHECK (outcome NOT IN ('refused', 'failed') OR reason IS NOT NULL)
);
CREATE INDEX idx_join_attempts_cluster_created_at ON join_attempts (cluster_id, created_at DESC);
CREATE INDEX idx_join_attempts_token_created_at ON join_attempts (token_id, created_at DESC);
CREATE TRIGGER join_attempts_set_updated_at BEFORE UPDATE ON join_attempts
    FOR EACH ROW EXECUTE FUNCTION set_updated_at();

CREATE TABLE join_attempt_steps (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    attempt_id  uuid NOT NULL REFERENCES join_attempts (id) ON DELETE CASCADE,
    step        text NOT NULL CHECK (step ~ '^[a-z][a-z0-9_]{0,31}$'),
    status      text NOT NULL CHECK (status IN ('running', 'ok', 'warning', 'failed', 'skipped')),
    detail      text CHECK (length(detail) <= 1000),
    reported_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX idx_join_attempt_steps_attempt ON join_attempt_steps (attempt_id, id);

-- Events the notification capability delivers (email, webhook) according to
-- each user's notification_settings; written in the transaction that records
-- what happened.
CREATE TABLE notification_outbox (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('cluster_ready', 'cluster_failed', 'node_offline', 'node_joined', 'order_paid')),
    cluster_id   uuid REFERENCES clusters (id),
    payload      jsonb NOT NULL DEFAULT '{}'::jsonb,
    delivered_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX idx_notification_outbox_undelivered ON notification_outbox (created_at)
    WHERE delivered_at IS NULL;

-- A node's timeline reads its events by node.
CREATE INDEX idx_node_events_node_observed_at ON node_events (node_id, observed_at DESC, id DESC);
