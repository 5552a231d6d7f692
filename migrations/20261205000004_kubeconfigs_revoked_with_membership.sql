-- A member taken out of an organisation (or leaving it), or made a viewer,
-- loses the kubeconfigs they hold in its clusters.
ALTER TABLE kubeconfig_credentials DROP CONSTRAINT kubeconfig_credentials_revoke_reason_check;
ALTER TABLE kubeconfig_credentials ADD CONSTRAINT kubeconfig_credentials_revoke_reason_check
    CHECK (revoke_reason IN ('user', 'user_disabled', 'password_changed', 'issue_failed',
                             'removed_from_organization', 'role_changed'));
