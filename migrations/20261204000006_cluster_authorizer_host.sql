-- The `host:port` the cluster's API server files name for the platform's
-- webhooks (the admission credential's user, the authorizer's server). A
-- cluster whose files name another host than the platform's current URL
-- (the URL moved, or the files predate this column) is registered anew by
-- an update job, which writes the files for the current host; until then
-- `sync-clusters` leaves its webhook configuration as it is.
ALTER TABLE cluster_authorizers ADD COLUMN webhook_host text;
