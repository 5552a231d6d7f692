-- Tenant PostgreSQL databases (docs/databases.md): the external PostgreSQL
-- servers an administrator registers, and the databases users ask for on
-- them for their clusters, walked through their phases by the
-- `database_converge` job.

-- The platform's install: the ownership registry in each instance names it,
-- so two platforms sharing a server never take each other's objects.
ALTER TABLE system_settings ADD COLUMN install_id uuid NOT NULL DEFAULT gen_random_uuid();

CREATE TABLE database_instances (
    id                       uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name                     text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    -- The DNS name the server's certificate is checked against.
    host                     text NOT NULL CHECK (char_length(host) BETWEEN 1 AND 253),
    -- Where to connect, when given (libpq's hostaddr): no DNS lookup.
    hostaddr                 inet,
    port                     integer NOT NULL DEFAULT 5432 CHECK (port BETWEEN 1 AND 65535),
    admin_database           text NOT NULL DEFAULT 'postgres' CHECK (char_length(admin_database) BETWEEN 1 AND 63),
    tls_mode                 text NOT NULL CHECK (tls_mode IN ('verify-full', 'require', 'disable')),
    ca_bundle                text CHECK (char_length(ca_bundle) <= 65536),
    admin_role               text NOT NULL CHECK (char_length(admin_role) BETWEEN 1 AND 63),
    admin_password_encrypted bytea NOT NULL,
    enabled                  boolean NOT NULL DEFAULT true,
    is_default               boolean NOT NULL DEFAULT false,
    -- The last connection check.
    server_version           text,
    can_create_role          boolean,
    can_create_database      boolean,
    checked_at               timestamptz,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    CHECK (tls_mode <> 'verify-full' OR ca_bundle IS NOT NULL)
);
-- At most one default instance.
CREATE UNIQUE INDEX idx_database_instances_default ON database_instances (is_default) WHERE is_default;

CREATE TABLE tenant_databases (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    cluster_id         uuid NOT NULL REFERENCES clusters (id) ON DELETE CASCADE,
    organization_id    uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    -- An instance is deleted only when no live cluster's database is on it
    -- (`instances::delete`); the records left go with it.
    instance_id        uuid NOT NULL REFERENCES database_instances (id) ON DELETE CASCADE,
    requested_by_user_id uuid REFERENCES users (id) ON DELETE SET NULL,
    -- The name the user gave; the platform derives the server's names from
    -- it and the cluster's id.
    name               text NOT NULL CHECK (name ~ '^[a-z][a-z0-9_]{0,29}$'),
    database_name      text NOT NULL CHECK (database_name ~ '^[a-z][a-z0-9_]{0,62}$'),
    role_name          text NOT NULL CHECK (role_name ~ '^[a-z][a-z0-9_]{0,62}$'),
    -- Where the credential's Secret is projected in the cluster.
    namespace          text NOT NULL DEFAULT 'default' CHECK (namespace ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    secret_name        text NOT NULL CHECK (secret_name ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    extensions         text[] NOT NULL DEFAULT '{}',
    deletion_policy    text NOT NULL DEFAULT 'retain' CHECK (deletion_policy IN ('retain', 'delete')),
    -- Where the job is: a checkpoint recorded before each external write.
    phase              text NOT NULL DEFAULT 'planned' CHECK (phase IN (
                           'planned', 'credential_created', 'role_created', 'database_created',
                           'secret_projected', 'ready', 'conflict', 'failed', 'deleting')),
    -- The phase a `failed` or `conflict` record stopped at: a retry
    -- resumes there.
    resume_phase       text CHECK (resume_phase IN (
                           'planned', 'credential_created', 'role_created', 'database_created',
                           'secret_projected', 'deleting')),
    -- What the user wants: the database, or its removal (by its policy).
    wanted             text NOT NULL DEFAULT 'present' CHECK (wanted IN ('present', 'absent')),
    conditions         jsonb NOT NULL DEFAULT '[]',
    last_error         text,
    password_encrypted bytea,
    observed_at        timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    -- Forgotten: the record is kept for its history, its names freed.
    deleted_at         timestamptz
);
CREATE UNIQUE INDEX idx_tenant_databases_cluster_name ON tenant_databases (cluster_id, name) WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX idx_tenant_databases_instance_database ON tenant_databases (instance_id, database_name) WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX idx_tenant_databases_instance_role ON tenant_databases (instance_id, role_name) WHERE deleted_at IS NULL;
CREATE INDEX idx_tenant_databases_instance ON tenant_databases (instance_id) WHERE deleted_at IS NULL;

CREATE TRIGGER database_instances_set_updated_at BEFORE UPDATE ON database_instances
    FOR EACH ROW WHEN (OLD.updated_at IS NOT DISTINCT FROM NEW.updated_at)
    EXECUTE FUNCTION set_updated_at();
CREATE TRIGGER tenant_databases_set_updated_at BEFORE UPDATE ON tenant_databases
    FOR EACH ROW WHEN (OLD.updated_at IS NOT DISTINCT FROM NEW.updated_at)
    EXECUTE FUNCTION set_updated_at();

ALTER TABLE cluster_operations
    DROP CONSTRAINT cluster_operations_type_check,
    ADD CONSTRAINT cluster_operations_type_check
        CHECK (type IN ('create', 'update', 'delete', 'node_remove', 'ingress_converge',
                        'endpoint_retire', 'database_converge'));

ALTER TABLE cluster_jobs
    DROP CONSTRAINT cluster_jobs_type_check,
    ADD CONSTRAINT cluster_jobs_type_check
        CHECK (type IN ('cluster_create', 'cluster_update', 'cluster_delete', 'node_remove',
                        'ingress_converge', 'endpoint_retire', 'database_converge'));
