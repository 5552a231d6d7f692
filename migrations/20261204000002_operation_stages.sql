-- Every stage an operation passes through, with when it was recorded: the
-- console shows them all, not only the one a poll happened to see.
ALTER TABLE cluster_operations
    ADD COLUMN stages jsonb NOT NULL DEFAULT '[]'::jsonb
    CONSTRAINT cluster_operations_stages_array CHECK (jsonb_typeof(stages) = 'array');

-- `stages` with {stage, at: now()} appended, keeping the newest 100 (a job
-- retried many times records its stages again on each attempt).
CREATE FUNCTION operation_stages_append(stages jsonb, stage text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN jsonb_array_length(stages) >= 100 THEN stages - 0 ELSE stages END
           || jsonb_build_array(jsonb_build_object('stage', stage, 'at', now()))
$$;
