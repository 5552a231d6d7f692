-- The back office's users filtered by role or by status, newest first: an
-- index walk of the matching users alone. A rare value (the administrators
-- among 10,000 users) walked every user by time to fill a page.
CREATE INDEX idx_users_role_created_at ON users (role, created_at DESC, id DESC)
    WHERE deleted_at IS NULL;
CREATE INDEX idx_users_status_created_at ON users (status, created_at DESC, id DESC)
    WHERE deleted_at IS NULL;
