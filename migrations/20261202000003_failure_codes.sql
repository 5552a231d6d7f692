-- Every failed job and operation carries a code from a small taxonomy
-- (shared::domain::FailureCode), beside its error in words. A job keeps the
-- code of its last error while it waits to retry, and each entry of its
-- error history names the code of that attempt's error.
ALTER TABLE cluster_jobs ADD COLUMN error_code text CHECK (error_code IN (
    'host_unreachable', 'host_rejected', 'quota_exceeded', 'chart_install_failed',
    'ingress_install_failed', 'timeout', 'drain_timeout', 'cluster_not_ready',
    'cluster_deleted', 'invalid_configuration', 'worker_lost', 'cancelled', 'internal'));
ALTER TABLE cluster_operations ADD COLUMN error_code text CHECK (error_code IN (
    'host_unreachable', 'host_rejected', 'quota_exceeded', 'chart_install_failed',
    'ingress_install_failed', 'timeout', 'drain_timeout', 'cluster_not_ready',
    'cluster_deleted', 'invalid_configuration', 'worker_lost', 'cancelled', 'internal'));

-- Errors recorded before codes existed: a lost lease and a cancellation are
-- known by their words; any other reads as the platform's own failure.
UPDATE cluster_jobs SET error_code = CASE
        WHEN status = 'cancelled' THEN 'cancelled'
        WHEN last_error LIKE '%(lease expired)' THEN 'worker_lost'
        ELSE 'internal' END
    WHERE last_error IS NOT NULL;
UPDATE cluster_operations o SET error_code = j.error_code
    FROM cluster_jobs j
    WHERE j.operation_id = o.id AND o.error_message IS NOT NULL AND j.error_code IS NOT NULL;

-- An error in words has its code, and a code its words.
ALTER TABLE cluster_jobs ADD CONSTRAINT cluster_jobs_error_code_with_error
    CHECK ((error_code IS NULL) = (last_error IS NULL));
