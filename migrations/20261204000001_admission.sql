-- The admission webhook registered inside every cluster (docs/admission.md).

-- The credentials in the webhook URLs a cluster's API server calls: SHA-256
-- of each secret, never the secret. More than one row while a rotation is
-- under way: every secret a registration may carry stays valid until a later
-- registration is known to be applied.
CREATE TABLE cluster_admission_secrets (
    cluster_id  uuid NOT NULL REFERENCES clusters (id) ON DELETE CASCADE,
    secret_hash bytea NOT NULL CHECK (length(secret_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster_id, secret_hash)
);

-- What the cluster's pods request, as sync-nodes last listed them (outside
-- the exempt namespaces), and its Node count. observed_at is when that list
-- began.
CREATE TABLE cluster_workload_usage (
    cluster_id               uuid PRIMARY KEY REFERENCES clusters (id) ON DELETE CASCADE,
    cpu_requests_milli_cores bigint NOT NULL CHECK (cpu_requests_milli_cores >= 0),
    memory_requests_mib      bigint NOT NULL CHECK (memory_requests_mib >= 0),
    pods                     integer NOT NULL CHECK (pods >= 0),
    nodes                    integer NOT NULL CHECK (nodes >= 0),
    observed_at              timestamptz NOT NULL
);

-- Pods admitted since the last observation: counted on top of it until an
-- observation that began after them (less the webhook timeout) covers them.
-- Soft state: unlogged (no WAL, so an admission waits on no disk flush),
-- emptied by a crash, after which the next observation is the whole truth.
CREATE UNLOGGED TABLE admission_reservations (
    cluster_id      uuid NOT NULL,
    review_uid      text NOT NULL CHECK (length(review_uid) BETWEEN 1 AND 128),
    cpu_milli_cores bigint NOT NULL CHECK (cpu_milli_cores >= 0),
    memory_mib      bigint NOT NULL CHECK (memory_mib >= 0),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster_id, review_uid)
);
CREATE INDEX idx_admission_reservations_cluster_created_at
    ON admission_reservations (cluster_id, created_at);

-- The sum of a cluster's reservations, kept by the statement that adds one
-- (which weighs the pod under this row's lock, so two pods at once are
-- weighed one after the other) and set again from the rows by each
-- observation. A review reads one row, however many pods were admitted.
CREATE UNLOGGED TABLE admission_reserved (
    cluster_id      uuid PRIMARY KEY REFERENCES clusters (id) ON DELETE CASCADE,
    cpu_milli_cores bigint NOT NULL CHECK (cpu_milli_cores >= 0),
    memory_mib      bigint NOT NULL CHECK (memory_mib >= 0)
);
