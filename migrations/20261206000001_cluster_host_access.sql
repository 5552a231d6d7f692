-- Which revision of the host access a cluster's namespace has
-- (shared::host::access: the jobs' RoleBinding to the tenant ClusterRole,
-- and the Role that lets the HTTP functions read the cluster's kubeconfig
-- Secret). 0: none made yet; sync-clusters makes them for live clusters
-- below the current revision, a few each pass.
ALTER TABLE clusters ADD COLUMN host_access_revision integer NOT NULL DEFAULT 0;

CREATE INDEX idx_clusters_host_access_revision ON clusters (host_access_revision)
    WHERE deleted_at IS NULL;
