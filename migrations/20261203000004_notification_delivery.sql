-- Notification delivery. Each outbox row fans out, once, into one delivery
-- per channel the user opted into (email, the platform's outbound webhook);
-- each delivery has its own attempts, backoff and final state. A delivery is
-- claimed (status sending, attempt counted, lease set) before anything is
-- sent and settled after, so a crash in between resends under the same
-- receiver-visible id, never silently twice.
ALTER TABLE notification_outbox
    DROP CONSTRAINT notification_outbox_kind_check,
    ADD CONSTRAINT notification_outbox_kind_check
        CHECK (kind IN ('cluster_ready', 'cluster_failed', 'node_offline', 'node_joined', 'order_paid', 'plan_limit_reached')),
    ADD COLUMN fanned_out_at timestamptz;
CREATE INDEX idx_notification_outbox_unfanned ON notification_outbox (id) WHERE fanned_out_at IS NULL;
-- A user's recent notifications of a kind: the once-a-day check of
-- plan_limit_reached reads them.
CREATE INDEX idx_notification_outbox_user_kind_created_at ON notification_outbox (user_id, kind, created_at DESC);
-- Rows written before delivery existed are history, not news.
UPDATE notification_outbox SET fanned_out_at = now(), delivered_at = coalesce(delivered_at, now());

ALTER TABLE notification_settings
    ADD COLUMN notify_plan_limit_reached boolean NOT NULL DEFAULT true;

CREATE TABLE notification_deliveries (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_id        bigint NOT NULL REFERENCES notification_outbox (id) ON DELETE CASCADE,
    channel          text NOT NULL CHECK (channel IN ('email', 'webhook')),
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sending', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_expires_at timestamptz,
    last_attempt_at  timestamptz,
    last_error       text CHECK (length(last_error) <= 1000),
    delivered_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (outbox_id, channel),
    CHECK ((status = 'sending') = (lease_expires_at IS NOT NULL)),
    CHECK ((status = 'delivered') = (delivered_at IS NOT NULL))
);
CREATE INDEX idx_notification_deliveries_due ON notification_deliveries (next_attempt_at, id)
    WHERE status = 'pending';
CREATE INDEX idx_notification_deliveries_leased ON notification_deliveries (lease_expires_at)
    WHERE status = 'sending';

-- A cluster that became ready (first, or again after a failure) or failed is
-- news for its owner, whichever code path moved it.
CREATE FUNCTION clusters_notify_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'ready' AND OLD.status IN ('pending', 'provisioning', 'failed') THEN
        INSERT INTO notification_outbox (user_id, kind, cluster_id, payload)
        VALUES (NEW.owner_user_id, 'cluster_ready', NEW.id,
                jsonb_build_object('cluster_name', NEW.name, 'api_endpoint', NEW.api_endpoint));
    ELSIF NEW.status = 'failed' AND OLD.status <> 'failed' THEN
        INSERT INTO notification_outbox (user_id, kind, cluster_id, payload)
        VALUES (NEW.owner_user_id, 'cluster_failed', NEW.id,
                jsonb_build_object('cluster_name', NEW.name, 'error', NEW.last_error_message));
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER clusters_notify_status AFTER UPDATE OF status ON clusters
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION clusters_notify_status();
