-- Fleet data for the benchmarks: a platform that succeeded, written through
-- the platform's own schema (its constraints and triggers: every user gets
-- a personal organization, every cluster its owner's). Run on a migrated
-- scratch database, never a real one:
--
--   psql "$DATABASE_URL" -f tests/bench/fleet.sql \
--     -v users=10000 -v clusters=50000 -v big=5000 -v nodes=200000 \
--     -v node_events=1000000 -v samples=5000000 -v audit=1000000 \
--     -v jobs=500000 -v hostnames=20000 -v deliveries=100000 \
--     -v orders=30000 -v logins=500000 -v week=200
--
-- Every variable has that default. User 1 is an admin; user 2 owns `big`
-- clusters; the others own the rest, a few each. Rows are made from their
-- position (ids are md5 of it, values follow from it), so two runs make the
-- same fleet, and a second run adds nothing: rows with ids are inserted
-- `ON CONFLICT DO NOTHING`, tables keyed by a sequence only while they hold
-- none of the fleet's rows. Each table is one set-based INSERT.

\set ON_ERROR_STOP on
\if :{?users} \else \set users 10000 \endif
\if :{?clusters} \else \set clusters 50000 \endif
\if :{?big} \else \set big 5000 \endif
\if :{?nodes} \else \set nodes 200000 \endif
\if :{?node_events} \else \set node_events 1000000 \endif
\if :{?samples} \else \set samples 5000000 \endif
\if :{?audit} \else \set audit 1000000 \endif
\if :{?jobs} \else \set jobs 500000 \endif
\if :{?hostnames} \else \set hostnames 20000 \endif
\if :{?deliveries} \else \set deliveries 100000 \endif
\if :{?orders} \else \set orders 30000 \endif
\if :{?logins} \else \set logins 500000 \endif
\if :{?week} \else \set week 200 \endif

-- Users, each with the personal organization its trigger makes.
INSERT INTO users (id, email, display_name, role, created_at)
SELECT md5('fleet-user-' || i)::uuid, 'fleet' || i || '@example.test', 'Fleet user ' || i,
       CASE WHEN i = 1 THEN 'admin' ELSE 'user' END,
       now() - (i % 730) * interval '1 day'
FROM generate_series(1, :users) i
ON CONFLICT DO NOTHING;

-- Clusters: the first `big` to user 2, the others spread over users 3….
INSERT INTO clusters (id, owner_user_id, name, vcluster_name, namespace, kubernetes_version,
                      workload_cpu_limit_milli_cores, workload_memory_limit_mib,
                      control_plane_cpu_request_milli_cores, control_plane_memory_request_mib,
                      public_access_mode, status, connection_status, created_at)
SELECT md5('fleet-cluster-' || i)::uuid,
       md5('fleet-user-' || CASE WHEN i <= :big THEN 2 ELSE 3 + i % (:users - 2) END)::uuid,
       'c' || i, 'c' || i, 'kb-' || md5('fleet-cluster-' || i), '1.33',
       1000 + (i % 8) * 500, 2048 + (i % 4) * 1024, 500, 512,
       CASE WHEN i % 5 = 0 THEN 'loadbalancer' ELSE 'nodeport' END,
       'ready', CASE WHEN i % 97 = 0 THEN 'unreachable' ELSE 'connected' END,
       now() - (i % 365) * interval '1 day'
FROM generate_series(1, :clusters) i
ON CONFLICT DO NOTHING;

-- Nodes, round-robin over the clusters; one in fifty offline.
INSERT INTO nodes (id, cluster_id, name, status, source, internal_ip, kubelet_version,
                   cpu_allocatable_milli_cores, memory_allocatable_bytes,
                   last_seen_at, ready_at, offline_at, created_at)
SELECT md5('fleet-node-' || j)::uuid, md5('fleet-cluster-' || (1 + j % :clusters))::uuid,
       'n' || j, CASE WHEN j % 50 = 0 THEN 'offline' ELSE 'ready' END, 'sync',
       ('10.' || (j / 65536) % 256 || '.' || (j / 256) % 256 || '.' || j % 256)::inet, 'v1.33.0',
       4000, 8589934592, now(), now() - interval '1 day',
       CASE WHEN j % 50 = 0 THEN now() - interval '1 hour' END, now() - interval '1 day'
FROM generate_series(1, :nodes) j
ON CONFLICT DO NOTHING;

-- Tables keyed by a sequence: filled once.
SELECT NOT EXISTS (SELECT 1 FROM node_events WHERE message = 'fleet') AS fill \gset
\if :fill
INSERT INTO node_events (cluster_id, node_name, type, old_status, new_status, message, observed_at)
SELECT md5('fleet-cluster-' || (1 + (k % :nodes) % :clusters))::uuid, 'n' || (k % :nodes),
       (ARRAY['ready', 'not_ready', 'offline', 'ready'])[1 + k % 4], 'ready', 'ready', 'fleet',
       now() - (k % 2160) * interval '1 hour'
FROM generate_series(1, :node_events) k;
\endif

SELECT NOT EXISTS (SELECT 1 FROM control_plane_metrics_snapshots WHERE pod_name = 'fleet-0') AS fill \gset
\if :fill
INSERT INTO control_plane_metrics_snapshots (cluster_id, available, namespace, pod_name, collected_at,
                                             load_average_1, total_cpu_percent, total_memory_rss_bytes,
                                             components)
SELECT md5('fleet-cluster-' || (1 + k % :clusters))::uuid, true, 'kb-' || md5('fleet-cluster-' || (1 + k % :clusters)),
       'fleet-0', now() - (k / :clusters) * interval '1 minute',
       (k % 300) / 100.0, (k % 1000) / 10.0, 134217728 + (k % 64) * 1048576, '[]'::jsonb
FROM generate_series(0, :samples - 1) k;
\endif

-- A week of samples, one a minute, for the first `week` clusters (user 2's),
-- written minute by minute across them as the collector writes them: one
-- cluster's week lies on as many pages as it has samples.
SELECT NOT EXISTS (SELECT 1 FROM control_plane_metrics_snapshots WHERE pod_name = 'fleet-week')
       AND :week > 0 AS fill \gset
\if :fill
INSERT INTO control_plane_metrics_snapshots (cluster_id, available, namespace, pod_name, collected_at,
                                             load_average_1, total_cpu_percent, total_memory_rss_bytes,
                                             components)
SELECT md5('fleet-cluster-' || c)::uuid, true, 'kb-' || md5('fleet-cluster-' || c), 'fleet-week',
       now() - interval '7 days' + m * interval '1 minute',
       (m % 300) / 100.0, (m % 1000) / 10.0, 134217728 + (m % 64) * 1048576, '[]'::jsonb
FROM generate_series(0, 10079) m, generate_series(1, :week) c
ORDER BY m, c;
\endif

SELECT NOT EXISTS (SELECT 1 FROM audit_events WHERE action = 'fleet.generated') AS fill \gset
\if :fill
INSERT INTO audit_events (actor_user_id, actor_kind, action, target_kind, target_id, cluster_id, metadata, created_at)
SELECT md5('fleet-user-' || (1 + k % :users))::uuid, 'user',
       CASE WHEN k = 0 THEN 'fleet.generated' ELSE (ARRAY['cluster.created', 'cluster.updated', 'token.created', 'auth.login'])[1 + k % 4] END,
       'cluster', md5('fleet-cluster-' || (1 + k % :clusters))::uuid::text,
       md5('fleet-cluster-' || (1 + k % :clusters))::uuid, '{}'::jsonb,
       now() - (k % 8760) * interval '1 hour'
FROM generate_series(0, :audit - 1) k;
\endif

-- Finished operations, one job each.
INSERT INTO cluster_operations (id, cluster_id, type, status, stage, started_at, finished_at, created_at)
SELECT md5('fleet-operation-' || k)::uuid, md5('fleet-cluster-' || (1 + k % :clusters))::uuid,
       (ARRAY['create', 'update', 'node_remove'])[1 + k % 3],
       CASE WHEN k % 40 = 0 THEN 'failed' ELSE 'succeeded' END, 'done',
       now() - (k % 2160) * interval '1 hour', now() - (k % 2160) * interval '1 hour' + interval '2 minutes',
       now() - (k % 2160) * interval '1 hour'
FROM generate_series(1, :jobs) k
ON CONFLICT DO NOTHING;
INSERT INTO cluster_jobs (id, cluster_id, operation_id, type, status, attempt_count, max_attempts,
                          started_at, finished_at, error_code, last_error, created_at)
SELECT md5('fleet-job-' || k)::uuid, md5('fleet-cluster-' || (1 + k % :clusters))::uuid,
       md5('fleet-operation-' || k)::uuid,
       (ARRAY['cluster_create', 'cluster_update', 'node_remove'])[1 + k % 3],
       CASE WHEN k % 40 = 0 THEN 'failed' ELSE 'succeeded' END, 1, 5,
       now() - (k % 2160) * interval '1 hour', now() - (k % 2160) * interval '1 hour' + interval '2 minutes',
       CASE WHEN k % 40 = 0 THEN 'timeout' END, CASE WHEN k % 40 = 0 THEN 'the control plane was not ready in time' END,
       now() - (k % 2160) * interval '1 hour'
FROM generate_series(1, :jobs) k
ON CONFLICT DO NOTHING;

-- Hostnames under the platform's domain, bound and verified.
INSERT INTO workload_ingress_hostname_bindings (id, cluster_id, hostname, status, dns_management_scope,
                                                dns_management_status, verified_at)
SELECT md5('fleet-hostname-' || k)::uuid, md5('fleet-cluster-' || (1 + k % :clusters))::uuid,
       'h' || k || '.apps.example.test', 'active', 'platform_managed', 'synced', now()
FROM generate_series(1, :hostnames) k
ON CONFLICT DO NOTHING;

-- Notifications, each with its email delivery, most delivered.
SELECT NOT EXISTS (SELECT 1 FROM notification_outbox WHERE payload ? 'fleet') AS fill \gset
\if :fill
WITH outbox AS (
    INSERT INTO notification_outbox (user_id, kind, cluster_id, payload, fanned_out_at, created_at)
    SELECT md5('fleet-user-' || (1 + k % :users))::uuid, 'cluster_ready',
           md5('fleet-cluster-' || (1 + k % :clusters))::uuid, jsonb_build_object('fleet', k), now(),
           now() - (k % 720) * interval '1 hour'
    FROM generate_series(1, :deliveries) k
    RETURNING id, payload
)
INSERT INTO notification_deliveries (outbox_id, channel, status, attempts, next_attempt_at, delivered_at)
SELECT id, 'email', CASE WHEN (payload->>'fleet')::int % 10 = 0 THEN 'pending' ELSE 'delivered' END,
       CASE WHEN (payload->>'fleet')::int % 10 = 0 THEN 0 ELSE 1 END, now(),
       CASE WHEN (payload->>'fleet')::int % 10 = 0 THEN NULL ELSE now() END
FROM outbox;
\endif

-- Three plans, and orders for them: the first `users` go one to each
-- organization, the rest to user 2's; one in twenty pending (the newest of
-- its organization, at most one each), one in ten cancelled, the others paid.
INSERT INTO plans (id, name, max_clusters, max_nodes, max_cpu_milli_cores, max_memory_mib,
                   max_hostnames, price_minor_units, currency)
SELECT md5('fleet-plan-' || k)::uuid, 'Fleet ' || k, 10 * k, 50 * k, 16000 * k, 65536 * k, 20 * k,
       1000 * k, 'usd'
FROM generate_series(1, 3) k
ON CONFLICT DO NOTHING;
INSERT INTO orders (id, user_id, organization_id, plan_id, status, amount, currency, paid_at,
                    cancelled_at, cancel_reason, created_at)
SELECT md5('fleet-order-' || k)::uuid, u.id, u.organization_id, md5('fleet-plan-' || (1 + k % 3))::uuid,
       CASE WHEN pending THEN 'pending' WHEN k % 10 = 0 THEN 'cancelled' ELSE 'paid' END,
       1000 * (1 + k % 3), 'usd',
       CASE WHEN NOT pending AND k % 10 <> 0 THEN now() - (k % 700) * interval '1 day' END,
       CASE WHEN NOT pending AND k % 10 = 0 THEN now() - (k % 700) * interval '1 day' END,
       CASE WHEN NOT pending AND k % 10 = 0 THEN 'user' END,
       CASE WHEN pending THEN now() ELSE now() - (k % 700) * interval '1 day' END
FROM generate_series(1, :orders) k
CROSS JOIN LATERAL (SELECT k <= :users AND k % 20 = 0 AS pending) p
JOIN LATERAL (SELECT id, (SELECT organization_id FROM organization_members m WHERE m.user_id = users.id
                          ORDER BY organization_id LIMIT 1) AS organization_id
              FROM users WHERE id = md5('fleet-user-' || CASE WHEN k <= :users THEN k ELSE 2 END)::uuid) u ON true
ON CONFLICT DO NOTHING;

-- Sign-ins, most successful.
SELECT NOT EXISTS (SELECT 1 FROM login_events WHERE user_agent = 'fleet') AS fill \gset
\if :fill
INSERT INTO login_events (user_id, email, method, success, failure_reason, ip, user_agent, created_at)
SELECT md5('fleet-user-' || (1 + k % :users))::uuid, 'fleet' || (1 + k % :users) || '@example.test',
       'password', k % 8 <> 0, CASE WHEN k % 8 = 0 THEN 'invalid_password' END,
       ('192.0.2.' || k % 256)::inet, 'fleet', now() - (k % 2160) * interval '1 hour'
FROM generate_series(1, :logins) k;
\endif

ANALYZE;
