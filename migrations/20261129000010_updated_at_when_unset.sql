-- updated_at maintenance without a PL/pgSQL call per row where the statement
-- stamps the row itself: the trigger now fires only when an update leaves
-- updated_at as it was. Every other update still gets now(). The job
-- backbone's claims and completions, which rewrite a row of cluster_jobs and
-- one of cluster_operations per job, set updated_at = now() in the statement.

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY[
        'users', 'external_identities', 'sessions', 'email_verification_codes',
        'notification_settings', 'api_keys', 'plans', 'orders', 'clusters',
        'cluster_operations', 'cluster_jobs', 'tokens', 'nodes',
        'workload_ingress_hostname_bindings', 'system_settings', 'join_attempts'
    ] LOOP
        EXECUTE format('DROP TRIGGER %I ON %I', t || '_set_updated_at', t);
        EXECUTE format(
            'CREATE TRIGGER %I BEFORE UPDATE ON %I FOR EACH ROW '
            'WHEN (OLD.updated_at IS NOT DISTINCT FROM NEW.updated_at) '
            'EXECUTE FUNCTION set_updated_at()',
            t || '_set_updated_at', t
        );
    END LOOP;
END;
$$;
