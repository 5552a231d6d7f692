-- Records the platform made in a hosted zone it no longer manages (the zone in
-- the settings was changed): sync-dns deletes each from its zone, each zone on
-- its own, then forgets it.
CREATE TABLE dns_retired_records (
    zone_id       text NOT NULL,
    name          text NOT NULL,
    value         text NOT NULL,
    retired_at    timestamptz NOT NULL DEFAULT now(),
    last_error    text,
    last_error_at timestamptz,
    PRIMARY KEY (zone_id, name)
);
