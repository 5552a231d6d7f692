-- Deleted users keep their row (clusters, audit events and orders point at
-- it) with everything personal scrubbed; SMTP settings say how to use TLS.

ALTER TABLE users
    ADD COLUMN deleted_at timestamptz,
    ADD CONSTRAINT users_deleted_are_disabled CHECK (deleted_at IS NULL OR status = 'disabled');

ALTER TABLE system_settings
    ADD COLUMN smtp_tls text NOT NULL DEFAULT 'starttls' CHECK (smtp_tls IN ('none', 'starttls', 'tls'));
