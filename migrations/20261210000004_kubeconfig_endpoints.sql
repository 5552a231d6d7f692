-- The address each kubeconfig was issued for (the cluster's api_endpoint at
-- the time): once the cluster's endpoint moves, the list says the
-- kubeconfig is stale and that a new one is to be downloaded. Unknown
-- (NULL) for kubeconfigs issued before.
ALTER TABLE kubeconfig_credentials ADD COLUMN api_endpoint text
    CHECK (char_length(api_endpoint) <= 2048);
