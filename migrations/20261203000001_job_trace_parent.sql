-- The W3C trace context (a `traceparent` value) of the span that enqueued
-- the job, when traces are exported: every attempt of the job, whichever
-- worker claims it and however its wake-up arrived, continues that trace.
ALTER TABLE cluster_jobs
    ADD COLUMN trace_parent text
        CONSTRAINT cluster_jobs_trace_parent_format
        CHECK (trace_parent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$');
