-- The rows of the job backbone are stamped by their statements alone. A job
-- and its operation are rewritten a few times per job, and a BEFORE UPDATE
-- row trigger makes PostgreSQL lock each row before updating it: a WAL record
-- per row, written even when the trigger's WHEN clause then declines to run
-- (migration 20261129000010). Every UPDATE of these two tables sets
-- updated_at = now() itself (test: schema::every_update_of_a_job_table_stamps_updated_at).
DROP TRIGGER cluster_jobs_set_updated_at ON cluster_jobs;
DROP TRIGGER cluster_operations_set_updated_at ON cluster_operations;
