-- A password change or reset revokes every kubeconfig credential of the
-- account, as it revokes its API keys: `password_changed`.
ALTER TABLE kubeconfig_credentials DROP CONSTRAINT kubeconfig_credentials_revoke_reason_check;
ALTER TABLE kubeconfig_credentials ADD CONSTRAINT kubeconfig_credentials_revoke_reason_check
    CHECK (revoke_reason IN ('user', 'user_disabled', 'password_changed', 'issue_failed'));
