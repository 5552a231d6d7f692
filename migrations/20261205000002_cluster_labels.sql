-- Labels of a cluster: key/value pairs its owner attaches to find clusters
-- by (docs/labels.md), with the syntax of Kubernetes labels (the API checks
-- it; the table keeps the bounds).
CREATE TABLE cluster_labels (
    cluster_id uuid NOT NULL REFERENCES clusters (id) ON DELETE CASCADE,
    key        text NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 317),
    value      text NOT NULL CHECK (octet_length(value) <= 63),
    PRIMARY KEY (cluster_id, key)
);

-- Finding the clusters that carry a key, or a key with a value.
CREATE INDEX idx_cluster_labels_key_value ON cluster_labels (key, value);
