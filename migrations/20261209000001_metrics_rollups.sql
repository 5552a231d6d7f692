-- A cluster's control-plane metrics summed per 10 minutes and per hour, in
-- the transaction of every sample written, so a range whose slices last
-- 10 minutes or more reads one row per bucket instead of every sample (a
-- week read 10,080 samples, one heap page each: the collector writes every
-- cluster's sample side by side).
--
-- Each row holds what the range API aggregates: the samples with figures
-- and without, and for each figure its sum, how many samples had it, and
-- its peak. A mean over several rows is the sum of their sums over the sum
-- of their counts: the mean of the samples themselves.
CREATE TABLE control_plane_metrics_rollups (
    cluster_id            uuid NOT NULL REFERENCES clusters (id),
    bucket_seconds        integer NOT NULL CHECK (bucket_seconds IN (600, 3600)),
    starts_at             timestamptz NOT NULL,
    samples               bigint NOT NULL DEFAULT 0,
    unavailable           bigint NOT NULL DEFAULT 0,
    cpu_percent_sum       double precision NOT NULL DEFAULT 0,
    cpu_percent_count     bigint NOT NULL DEFAULT 0,
    cpu_percent_max       double precision,
    memory_bytes_sum      numeric NOT NULL DEFAULT 0,
    memory_bytes_count    bigint NOT NULL DEFAULT 0,
    memory_bytes_max      bigint,
    memory_virtual_sum    numeric NOT NULL DEFAULT 0,
    memory_virtual_count  bigint NOT NULL DEFAULT 0,
    memory_virtual_max    bigint,
    load_average_1_sum    double precision NOT NULL DEFAULT 0,
    load_average_1_count  bigint NOT NULL DEFAULT 0,
    load_average_1_max    double precision,
    PRIMARY KEY (cluster_id, bucket_seconds, starts_at)
);
-- Pruned by age, like the samples (`shared::metrics::prune`).
CREATE INDEX idx_control_plane_metrics_rollups_starts_at
    ON control_plane_metrics_rollups (starts_at);

-- The statement that adds the buckets of the samples in `source` (the
-- trigger's transition table, or the whole table for the backfill below).
-- Run with EXECUTE: a trigger's transition table is visible to the
-- trigger's own function only, so the statement is made here once and run
-- there. The collector writes a cycle's samples in one statement.
CREATE FUNCTION control_plane_metrics_rollup(source text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT format($sql$
        INSERT INTO control_plane_metrics_rollups AS r
            (cluster_id, bucket_seconds, starts_at, samples, unavailable,
             cpu_percent_sum, cpu_percent_count, cpu_percent_max,
             memory_bytes_sum, memory_bytes_count, memory_bytes_max,
             memory_virtual_sum, memory_virtual_count, memory_virtual_max,
             load_average_1_sum, load_average_1_count, load_average_1_max)
        SELECT s.cluster_id, b.seconds,
               to_timestamp(floor(extract(epoch FROM s.collected_at) / b.seconds) * b.seconds),
               count(*) FILTER (WHERE s.available), count(*) FILTER (WHERE NOT s.available),
               coalesce(sum(s.total_cpu_percent), 0), count(s.total_cpu_percent), max(s.total_cpu_percent),
               coalesce(sum(s.total_memory_rss_bytes), 0), count(s.total_memory_rss_bytes),
               max(s.total_memory_rss_bytes),
               coalesce(sum(s.total_memory_virtual_bytes), 0), count(s.total_memory_virtual_bytes),
               max(s.total_memory_virtual_bytes),
               coalesce(sum(s.load_average_1), 0), count(s.load_average_1), max(s.load_average_1)
        FROM %s s CROSS JOIN (VALUES (600), (3600)) AS b (seconds)
        GROUP BY 1, 2, 3
        -- Rows locked in one order: two writers never wait on each other in turn.
        ORDER BY 1, 2, 3
        ON CONFLICT (cluster_id, bucket_seconds, starts_at) DO UPDATE SET
            samples = r.samples + EXCLUDED.samples,
            unavailable = r.unavailable + EXCLUDED.unavailable,
            cpu_percent_sum = r.cpu_percent_sum + EXCLUDED.cpu_percent_sum,
            cpu_percent_count = r.cpu_percent_count + EXCLUDED.cpu_percent_count,
            cpu_percent_max = greatest(r.cpu_percent_max, EXCLUDED.cpu_percent_max),
            memory_bytes_sum = r.memory_bytes_sum + EXCLUDED.memory_bytes_sum,
            memory_bytes_count = r.memory_bytes_count + EXCLUDED.memory_bytes_count,
            memory_bytes_max = greatest(r.memory_bytes_max, EXCLUDED.memory_bytes_max),
            memory_virtual_sum = r.memory_virtual_sum + EXCLUDED.memory_virtual_sum,
            memory_virtual_count = r.memory_virtual_count + EXCLUDED.memory_virtual_count,
            memory_virtual_max = greatest(r.memory_virtual_max, EXCLUDED.memory_virtual_max),
            load_average_1_sum = r.load_average_1_sum + EXCLUDED.load_average_1_sum,
            load_average_1_count = r.load_average_1_count + EXCLUDED.load_average_1_count,
            load_average_1_max = greatest(r.load_average_1_max, EXCLUDED.load_average_1_max)
        $sql$, quote_ident(source))
$$;

CREATE FUNCTION control_plane_metrics_rolled_up() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE control_plane_metrics_rollup('new_samples');
    RETURN NULL;
END
$$;

CREATE TRIGGER control_plane_metrics_rolled_up AFTER INSERT ON control_plane_metrics_snapshots
REFERENCING NEW TABLE AS new_samples
FOR EACH STATEMENT EXECUTE FUNCTION control_plane_metrics_rolled_up();

-- Samples are written, then only pruned: an update or a delete of one
-- would leave its buckets wrong.
CREATE FUNCTION control_plane_metrics_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'control-plane metrics samples are not updated';
END
$$;

CREATE TRIGGER control_plane_metrics_append_only BEFORE UPDATE ON control_plane_metrics_snapshots
FOR EACH STATEMENT EXECUTE FUNCTION control_plane_metrics_append_only();

-- The samples written before.
LOCK TABLE control_plane_metrics_snapshots IN SHARE MODE;
DO $$ BEGIN EXECUTE control_plane_metrics_rollup('control_plane_metrics_snapshots'); END $$;
