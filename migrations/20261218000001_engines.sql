-- What runs each cluster's control plane. Every cluster made so far runs
-- on vCluster; a new cluster is given the platform's engine
-- (KUBEBYON_ENGINE) by the create route, which always names one.
ALTER TABLE clusters
    ADD COLUMN engine text NOT NULL DEFAULT 'vcluster'
        CONSTRAINT clusters_engine_check CHECK (engine IN ('kamaji', 'vcluster'));
