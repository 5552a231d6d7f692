-- KubeBYON initial schema: the 19 tables of the data model, their indexes,
-- foreign keys and the invariants the database enforces.

CREATE EXTENSION IF NOT EXISTS citext;

CREATE FUNCTION set_updated_at() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;

-- Identity and users ---------------------------------------------------------

CREATE TABLE users (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email             citext NOT NULL UNIQUE CHECK (length(email) BETWEEN 3 AND 320),
    display_name      text NOT NULL CHECK (length(display_name) BETWEEN 1 AND 200),
    password_hash     text,
    role              text NOT NULL DEFAULT 'user' CHECK (role IN ('user', 'admin')),
    status            text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
    email_verified_at timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE external_identities (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    provider   text NOT NULL CHECK (provider IN ('github', 'google')),
    subject    text NOT NULL,
    email      citext,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider, subject)
);
CREATE INDEX idx_external_identities_user_id ON external_identities (user_id);

CREATE TABLE sessions (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id      uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    token_hash   bytea NOT NULL UNIQUE,
    expires_at   timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz NOT NULL DEFAULT now(),
    ip           inet,
    user_agent   text
);
CREATE INDEX idx_sessions_user_id ON sessions (user_id);
CREATE INDEX idx_sessions_expires_at ON sessions (expires_at);

CREATE TABLE login_events (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id        uuid REFERENCES users (id) ON DELETE SET NULL,
    email          citext,
    method         text NOT NULL CHECK (method IN ('password', 'github', 'google', 'api_key')),
    success        boolean NOT NULL,
    failure_reason text,
    ip             inet,
    user_agent     text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CHECK (success OR failure_reason IS NOT NULL)
);
CREATE INDEX idx_login_events_user_created_at ON login_events (user_id, created_at DESC);

CREATE TABLE email_verification_codes (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email       citext NOT NULL,
    purpose     text NOT NULL CHECK (purpose IN ('verify_email', 'reset_password')),
    code_hash   bytea NOT NULL,
    expires_at  timestamptz NOT NULL,
    attempts    integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    consumed_at timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
-- One live code per address and purpose.
CREATE UNIQUE INDEX idx_email_verification_codes_active
    ON email_verification_codes (email, purpose) WHERE consumed_at IS NULL;

CREATE TABLE notification_settings (
    user_id                 uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    email_enabled           boolean NOT NULL DEFAULT true,
    webhook_enabled         boolean NOT NULL DEFAULT false,
    notify_cluster_ready    boolean NOT NULL DEFAULT true,
    notify_cluster_failed   boolean NOT NULL DEFAULT true,
    notify_node_offline     boolean NOT NULL DEFAULT true,
    notify_node_joined      boolean NOT NULL DEFAULT false,
    notify_order_paid       boolean NOT NULL DEFAULT true,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id      uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    prefix       text NOT NULL,
    token_hash   bytea NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz
);
CREATE INDEX idx_api_keys_user_id_created_at ON api_keys (user_id, created_at DESC);

-- Plans and orders ------------------------------------------------------------

CREATE TABLE plans (
    id                      uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name                    text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 100),
    max_clusters            integer NOT NULL CHECK (max_clusters >= 0),
    max_nodes               integer NOT NULL CHECK (max_nodes >= 0),
    max_cpu_milli_cores     integer NOT NULL CHECK (max_cpu_milli_cores >= 0),
    max_memory_mib          integer NOT NULL CHECK (max_memory_mib >= 0),
    max_hostnames           integer NOT NULL CHECK (max_hostnames >= 0),
    price_minor_units       bigint NOT NULL CHECK (price_minor_units >= 0),
    currency                text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    active                  boolean NOT NULL DEFAULT true,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE orders (
    id                         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id                    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    plan_id                    uuid NOT NULL REFERENCES plans (id),
    status                     text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'paid', 'cancelled')),
    amount                     bigint NOT NULL CHECK (amount >= 0),
    currency                   text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    stripe_checkout_session_id text UNIQUE,
    stripe_payment_intent_id   text,
    paid_at                    timestamptz,
    cancelled_at               timestamptz,
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now(),
    CHECK ((status = 'paid') = (paid_at IS NOT NULL)),
    CHECK ((status = 'cancelled') = (cancelled_at IS NOT NULL))
);
CREATE INDEX idx_orders_user_created_at ON orders (user_id, created_at DESC);
CREATE INDEX idx_orders_user_status_paid_at ON orders (user_id, status, paid_at DESC);

-- Clusters and infrastructure -------------------------------------------------

CREATE TABLE clusters (
    id                                         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner_user_id                              uuid NOT NULL REFERENCES users (id),
    name                                       text NOT NULL CHECK (name ~ '^[a-z]([-a-z0-9]*[a-z0-9])?$' AND length(name) <= 40),
    vcluster_name                              text NOT NULL,
    namespace                                  text NOT NULL,
    control_plane_host                         text,
    kubernetes_version                         text NOT NULL,
    workload_cpu_limit_milli_cores             integer NOT NULL CHECK (workload_cpu_limit_milli_cores > 0),
    workload_memory_limit_mib                  integer NOT NULL CHECK (workload_memory_limit_mib > 0),
    control_plane_cpu_request_milli_cores      integer NOT NULL CHECK (control_plane_cpu_request_milli_cores > 0),
    control_plane_memory_request_mib           integer NOT NULL CHECK (control_plane_memory_request_mib > 0),
    public_access_enabled                      boolean NOT NULL DEFAULT true,
    public_access_mode                         text NOT NULL CHECK (public_access_mode IN ('nodeport', 'loadbalancer')),
    public_access_port                         integer CHECK (public_access_port BETWEEN 1 AND 65535),
    managed_workload_ingress_enabled           boolean NOT NULL DEFAULT false,
    managed_workload_ingress_status            text NOT NULL DEFAULT 'disabled'
        CHECK (managed_workload_ingress_status IN ('disabled', 'provisioning', 'ready', 'error')),
    managed_workload_ingress_class             text NOT NULL DEFAULT 'kubebyon',
    managed_workload_ingress_last_error        text,
    managed_workload_ingress_dns_record_name   text,
    managed_workload_ingress_dns_target        text,
    managed_workload_ingress_dns_zone_id       text,
    managed_workload_ingress_dns_provider      text,
    managed_workload_ingress_dns_last_synced_at timestamptz,
    managed_workload_ingress_dns_last_error    text,
    managed_workload_ingress_dns_last_error_at timestamptz,
    tailscale_enabled                          boolean NOT NULL DEFAULT false,
    api_endpoint                               text,
    status                                     text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'provisioning', 'ready', 'updating', 'deleting', 'deleted', 'failed')),
    connection_status                          text NOT NULL DEFAULT 'unknown'
        CHECK (connection_status IN ('unknown', 'connected', 'unreachable')),
    kubeconfig_available                       boolean NOT NULL DEFAULT false,
    kubeconfig_available_at                    timestamptz,
    last_observed_at                           timestamptz,
    last_error_message                         text,
    pod_cidr                                   cidr,
    service_cidr                               cidr,
    deleted_at                                 timestamptz,
    created_at                                 timestamptz NOT NULL DEFAULT now(),
    updated_at                                 timestamptz NOT NULL DEFAULT now(),
    CHECK ((status = 'deleted') = (deleted_at IS NOT NULL)),
    CHECK (kubeconfig_available = (kubeconfig_available_at IS NOT NULL))
);
CREATE INDEX idx_clusters_owner_user_id_created_at ON clusters (owner_user_id, created_at DESC);
CREATE INDEX idx_clusters_status ON clusters (status);
CREATE UNIQUE INDEX idx_clusters_namespace_vcluster_name_active
    ON clusters (namespace, vcluster_name) WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX idx_clusters_owner_name_active
    ON clusters (owner_user_id, name) WHERE deleted_at IS NULL;

CREATE TABLE cluster_operations (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    cluster_id           uuid NOT NULL REFERENCES clusters (id),
    type                 text NOT NULL CHECK (type IN ('create', 'update', 'delete')),
    status               text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
    stage                text NOT NULL DEFAULT 'queued',
    requested_by_user_id uuid REFERENCES users (id) ON DELETE SET NULL,
    error_message        text,
    started_at           timestamptz,
    finished_at          timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CHECK ((status IN ('succeeded', 'failed', 'cancelled')) = (finished_at IS NOT NULL))
);
CREATE INDEX idx_cluster_operations_cluster_created_at ON cluster_operations (cluster_id, created_at DESC);

CREATE TABLE cluster_jobs (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    cluster_id    uuid NOT NULL REFERENCES clusters (id),
    operation_id  uuid NOT NULL REFERENCES cluster_operations (id),
    type          text NOT NULL CHECK (type IN ('cluster_create', 'cluster_update', 'cluster_delete')),
    status        text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
    payload       jsonb NOT NULL DEFAULT '{}'::jsonb,
    attempt_count integer NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    max_attempts  integer NOT NULL CHECK (max_attempts >= 1),
    run_after     timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz,
    leased_until  timestamptz,
    worker_id     text,
    last_error    text,
    error_history jsonb NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(error_history) = 'array'),
    started_at    timestamptz,
    finished_at   timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CHECK (attempt_count <= max_attempts),
    CHECK ((status = 'running') = (leased_until IS NOT NULL)),
    CHECK (status <> 'running' OR worker_id IS NOT NULL),
    CHECK ((status IN ('succeeded', 'failed', 'cancelled')) = (finished_at IS NOT NULL))
);
CREATE INDEX idx_cluster_jobs_status_created_at ON cluster_jobs (status, created_at);
CREATE INDEX idx_cluster_jobs_cluster_created_at ON cluster_jobs (cluster_id, created_at DESC);
CREATE INDEX idx_cluster_jobs_pending_publish ON cluster_jobs (run_after)
    WHERE status = 'pending' AND published_at IS NULL;
CREATE INDEX idx_cluster_jobs_running_lease ON cluster_jobs (leased_until) WHERE status = 'running';
CREATE UNIQUE INDEX idx_cluster_jobs_active_cluster ON cluster_jobs (cluster_id)
    WHERE status IN ('pending', 'running');

CREATE TABLE tokens (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    cluster_id          uuid NOT NULL REFERENCES clusters (id),
    token_hash          bytea NOT NULL UNIQUE,
    display_prefix      text NOT NULL,
    status              text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'used', 'expired', 'revoked')),
    max_uses            integer NOT NULL DEFAULT 1 CHECK (max_uses >= 1),
    use_count           integer NOT NULL DEFAULT 0 CHECK (use_count >= 0),
    created_by_user_id  uuid REFERENCES users (id) ON DELETE SET NULL,
    used_by_node_id     uuid,
    bootstrap_secret_name text,
    expires_at          timestamptz NOT NULL,
    used_at             timestamptz,
    revoked_at          timestamptz,
    revoked_by_user_id  uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CHECK (use_count <= max_uses),
    CHECK ((status = 'revoked') = (revoked_at IS NOT NULL))
);
CREATE INDEX idx_tokens_cluster_created_at ON tokens (cluster_id, created_at DESC);
CREATE INDEX idx_tokens_cluster_status ON tokens (cluster_id, status);

CREATE TABLE nodes (
    id                                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    cluster_id                           uuid NOT NULL REFERENCES clusters (id),
    name                                 text NOT NULL,
    status                               text NOT NULL CHECK (status IN ('pending', 'ready', 'not_ready', 'offline', 'deleted')),
    internal_ip                          inet,
    os_image                             text,
    kubelet_version                      text,
    container_runtime_version            text,
    cpu_allocatable_milli_cores          bigint,
    memory_allocatable_bytes             bigint,
    ephemeral_storage_allocatable_bytes  bigint,
    source                               text NOT NULL DEFAULT 'sync' CHECK (source IN ('sync', 'join')),
    last_seen_at                         timestamptz,
    ready_at                             timestamptz,
    offline_at                           timestamptz,
    deleted_at                           timestamptz,
    created_at                           timestamptz NOT NULL DEFAULT now(),
    updated_at                           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (cluster_id, name)
);
ALTER TABLE tokens ADD CONSTRAINT tokens_used_by_node_id_fkey
    FOREIGN KEY (used_by_node_id) REFERENCES nodes (id);
CREATE INDEX idx_nodes_cluster_created_at ON nodes (cluster_id, created_at DESC);
CREATE INDEX idx_nodes_cluster_deleted_at ON nodes (cluster_id, deleted_at);

CREATE TABLE node_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster_id  uuid NOT NULL REFERENCES clusters (id),
    node_id     uuid REFERENCES nodes (id),
    node_name   text NOT NULL,
    type        text NOT NULL CHECK (type IN ('joined', 'ready', 'not_ready', 'pending', 'offline', 'deleted')),
    old_status  text,
    new_status  text,
    message     text,
    observed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX idx_node_events_cluster_observed_at ON node_events (cluster_id, observed_at DESC, id DESC);

CREATE TABLE control_plane_metrics_snapshots (
    id                         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster_id                 uuid NOT NULL REFERENCES clusters (id),
    available                  boolean NOT NULL,
    namespace                  text NOT NULL,
    pod_name                   text,
    collected_at               timestamptz NOT NULL DEFAULT now(),
    load_average_1             double precision,
    load_average_5             double precision,
    load_average_15            double precision,
    total_cpu_percent          double precision,
    total_memory_rss_bytes     bigint,
    total_memory_virtual_bytes bigint,
    components                 jsonb NOT NULL DEFAULT '[]'::jsonb,
    error_message              text,
    CHECK (available OR error_message IS NOT NULL)
);
CREATE INDEX idx_control_plane_metrics_cluster_collected_at
    ON control_plane_metrics_snapshots (cluster_id, collected_at DESC);

CREATE TABLE workload_ingress_hostname_bindings (
    id                             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    cluster_id                     uuid NOT NULL REFERENCES clusters (id),
    hostname                       text NOT NULL CHECK (hostname = lower(hostname) AND length(hostname) <= 253),
    status                         text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'resolving', 'active', 'error')),
    last_error                     text,
    managed_dns_record_name        text,
    managed_dns_target             text,
    managed_dns_zone_id            text,
    managed_dns_provider           text,
    dns_management_last_synced_at  timestamptz,
    dns_management_last_error      text,
    dns_management_last_error_at   timestamptz,
    tls_mode                       text NOT NULL DEFAULT 'none' CHECK (tls_mode IN ('none', 'cert_manager', 'secret')),
    tls_secret_name                text,
    tls_status                     text NOT NULL DEFAULT 'none' CHECK (tls_status IN ('none', 'pending', 'ready', 'error')),
    tls_last_synced_at             timestamptz,
    tls_last_error                 text,
    tls_last_error_at              timestamptz,
    created_at                     timestamptz NOT NULL DEFAULT now(),
    updated_at                     timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX idx_workload_ingress_hostname_bindings_hostname
    ON workload_ingress_hostname_bindings (hostname);
CREATE INDEX idx_workload_ingress_hostname_bindings_cluster_created_at
    ON workload_ingress_hostname_bindings (cluster_id, created_at DESC);

CREATE TABLE audit_events (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    actor_user_id uuid REFERENCES users (id) ON DELETE SET NULL,
    actor_kind    text NOT NULL CHECK (actor_kind IN ('user', 'admin', 'system', 'node')),
    action        text NOT NULL,
    target_kind   text,
    target_id     text,
    cluster_id    uuid REFERENCES clusters (id),
    metadata      jsonb NOT NULL DEFAULT '{}'::jsonb,
    ip            inet,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX idx_audit_events_actor_created_at ON audit_events (actor_user_id, created_at DESC, id DESC);
CREATE INDEX idx_audit_events_created_at ON audit_events (created_at DESC, id DESC);

-- Settings --------------------------------------------------------------------

CREATE TABLE system_settings (
    id                                            boolean PRIMARY KEY DEFAULT true CHECK (id),
    public_base_url                               text,
    join_base_url                                 text,
    managed_workload_ingress_base_domain          text,
    managed_workload_ingress_dns_provider         text CHECK (managed_workload_ingress_dns_provider IN ('route53')),
    managed_workload_ingress_dns_zone_id          text,
    managed_workload_ingress_dns_endpoint         text,
    managed_workload_ingress_dns_access_key_id    text,
    managed_workload_ingress_dns_secret_encrypted bytea,
    managed_workload_ingress_dns_record_ttl       integer NOT NULL DEFAULT 300 CHECK (managed_workload_ingress_dns_record_ttl BETWEEN 1 AND 172800),
    default_cluster_public_access_mode            text NOT NULL DEFAULT 'loadbalancer'
        CHECK (default_cluster_public_access_mode IN ('nodeport', 'loadbalancer')),
    github_oauth_client_id                        text,
    github_oauth_client_secret_encrypted          bytea,
    google_oauth_client_id                        text,
    google_oauth_client_secret_encrypted          bytea,
    captcha_enabled                               boolean NOT NULL DEFAULT false,
    captcha_verify_url                            text,
    captcha_site_key                              text,
    captcha_secret_encrypted                      bytea,
    smtp_host                                     text,
    smtp_port                                     integer CHECK (smtp_port BETWEEN 1 AND 65535),
    smtp_username                                 text,
    smtp_password_encrypted                       bytea,
    smtp_from                                     text,
    outbound_webhook_url                          text,
    outbound_webhook_secret_encrypted             bytea,
    created_at                                    timestamptz NOT NULL DEFAULT now(),
    updated_at                                    timestamptz NOT NULL DEFAULT now()
);
INSERT INTO system_settings (id) VALUES (true);

-- updated_at maintenance --------------------------------------------------------

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY[
        'users', 'external_identities', 'sessions', 'email_verification_codes',
        'notification_settings', 'api_keys', 'plans', 'orders', 'clusters',
        'cluster_operations', 'cluster_jobs', 'tokens', 'nodes',
        'workload_ingress_hostname_bindings', 'system_settings'
    ] LOOP
        EXECUTE format(
            'CREATE TRIGGER %I BEFORE UPDATE ON %I FOR EACH ROW EXECUTE FUNCTION set_updated_at()',
            t || '_set_updated_at', t
        );
    END LOOP;
END;
$$;
