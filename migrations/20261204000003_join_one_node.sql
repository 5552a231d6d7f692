-- One node per join attempt: the platform approves the joining kubelet's
-- client certificate request itself, for the host name the attempt reported,
-- once. The attempt records the request it approved and when.
ALTER TABLE join_attempts
    ADD COLUMN node_request_name text CHECK (length(node_request_name) <= 253),
    ADD COLUMN node_approved_at timestamptz,
    -- When the cluster was last asked about the attempt's requests: polls
    -- closer together than a second are answered without asking it.
    ADD COLUMN node_checked_at timestamptz,
    ADD CONSTRAINT join_attempts_approval_names_request
        CHECK ((node_approved_at IS NULL) = (node_request_name IS NULL));
