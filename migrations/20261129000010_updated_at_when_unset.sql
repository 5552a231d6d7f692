-- updated_at maintenance without a PL/pgSQL call per row where the statement
-- stamps the row itself: the trigger now fires only when an update leaves
-- updated_at as it was. Every other update still gets now(). The job
-- backbone's claims and completions, which rewrite a row of cluster_jobs and
-- one of cluster_operations per job, set updated_at = now() in the statement.

DO $$
DECLARE
    existing record;
BEGIN
    -- Every trigger that runs set_updated_at(), whichever migration made it.
    FOR existing IN
        SELECT tgname, tgrelid::regclass AS table_name
        FROM pg_trigger
        WHERE tgfoid = 'set_updated_at'::regproc AND NOT tgisinternal
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', existing.tgname, existing.table_name);
        EXECUTE format(
            'CREATE TRIGGER %I BEFORE UPDATE ON %s FOR EACH ROW '
            'WHEN (OLD.updated_at IS NOT DISTINCT FROM NEW.updated_at) '
            'EXECUTE FUNCTION set_updated_at()',
            existing.tgname, existing.table_name
        );
    END LOOP;
END;
$$;
