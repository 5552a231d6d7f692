-- Why a join attempt ended, and what each of its steps said, as a code with
-- parameters beside the English text: the console words them in the reader's
-- language. Attempts and steps from before keep their text alone.

ALTER TABLE join_attempts
    ADD COLUMN reason_code text CHECK (reason_code ~ '^[a-z][a-z0-9_]{0,47}$'),
    ADD COLUMN reason_params jsonb CHECK (jsonb_typeof(reason_params) = 'object'),
    ADD CONSTRAINT join_attempts_reason_code_has_reason CHECK (reason_code IS NULL OR reason IS NOT NULL),
    ADD CONSTRAINT join_attempts_reason_params_have_code CHECK (reason_params IS NULL OR reason_code IS NOT NULL);

ALTER TABLE join_attempt_steps
    ADD COLUMN code text CHECK (code ~ '^[a-z][a-z0-9_]{0,47}$'),
    ADD COLUMN params jsonb CHECK (jsonb_typeof(params) = 'object'),
    ADD CONSTRAINT join_attempt_steps_params_have_code CHECK (params IS NULL OR code IS NOT NULL);
