-- Kinds of work are declared by the capabilities that do them (a job kind
-- beside its payload type), not listed here: a job's type and an
-- operation's type keep only their syntax, the queue name a kind declares
-- (`JobKind::check`), and a new kind needs no constraint re-made.
ALTER TABLE cluster_operations
    DROP CONSTRAINT cluster_operations_type_check,
    ADD CONSTRAINT cluster_operations_type_check
        CHECK (type ~ '^[a-z][a-z0-9_]{0,39}$');

ALTER TABLE cluster_jobs
    DROP CONSTRAINT cluster_jobs_type_check,
    ADD CONSTRAINT cluster_jobs_type_check
        CHECK (type ~ '^[a-z][a-z0-9_]{0,39}$');
