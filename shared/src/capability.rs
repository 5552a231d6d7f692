//! What a capability adds to the platform, declared once in its own folder
//! (`pub const CAPABILITY: Capability` in its module) and collected by
//! `app::capabilities`, whose list `scripts/check-modules.py` writes from
//! the folders. The platform reads the collection; no list of its own grows
//! when a capability lands (docs/decisions/2026-12-08-capabilities-declare-what-they-add.md).

use std::time::Duration;

use futures_util::future::BoxFuture;
use sqlx::PgConnection;

use crate::{
    config::{ConfigError, Part, Settings},
    domain::JobKind,
    organizations::Action,
    secretbox::SecretBox,
    settings::{ResealError, Resealed},
};

/// Re-seals a capability's stored secrets under the current key, in the
/// caller's transaction (`app::settings::reseal` runs every one).
pub type Reseal =
    for<'a> fn(&'a mut PgConnection, &'a SecretBox) -> BoxFuture<'a, Result<Resealed, ResealError>>;

/// Deletes at most `batch` rows of a history older than `age`, oldest
/// first, in one statement; how many it deleted.
pub type Prune =
    for<'a> fn(&'a mut PgConnection, Duration, i64) -> BoxFuture<'a, Result<u64, sqlx::Error>>;

/// A history a capability keeps, pruned past its age by `sweep` in bounded
/// batches (`app::retention`).
#[derive(Debug, Clone, Copy)]
pub struct History {
    /// Its name in the sweep's report (`node_events`).
    pub name: &'static str,
    /// The variable that sets its age (`NODE_EVENTS_RETENTION_MS`), and the
    /// age without it, in days.
    pub variable: &'static str,
    pub default_days: u64,
    pub prune: Prune,
}

/// Reads a part of the process's settings (and keeps it), as a process
/// starts: [`setting`] makes one of a [`Part`].
pub type SettingCheck = fn(&Settings) -> Result<(), ConfigError>;

/// One capability's declaration.
#[derive(Debug, Clone, Copy)]
pub struct Capability {
    /// Its module's name.
    pub name: &'static str,
    /// The kinds of work it does on the job backbone, beside their payload
    /// types ([`crate::domain::JobPayload::KIND`]).
    pub job_kinds: &'static [JobKind],
    /// The problem codes its shared modules answer with (those of its
    /// functions' own refusals are theirs: `openapi::answering`).
    pub problem_codes: &'static [&'static str],
    /// Its parts of the process's settings, each read as a process starts.
    pub settings: &'static [SettingCheck],
    /// Its stored secrets' re-seal under a new key.
    pub reseal: Option<Reseal>,
    /// The histories it keeps, each pruned past its age.
    pub histories: &'static [History],
    /// What each of its cluster routes that changes something does: the
    /// action a member's role must allow (`http::owned`; a route missing
    /// here is for owners alone, reading is for every member).
    pub cluster_routes: &'static [ClusterRoute],
    /// The routes (and everything under them) an organisation's API key may
    /// call (`http::caller`); every other route is its makers' alone.
    pub organization_key_routes: &'static [&'static str],
}

/// A cluster route that changes something, and what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterRoute {
    pub method: &'static str,
    /// The route under `/api/console/clusters/{cluster_id}` (`""` for the
    /// cluster itself), with axum's `{name}` segments.
    pub route: &'static str,
    pub action: Action,
}

impl ClusterRoute {
    pub const fn new(method: &'static str, route: &'static str, action: Action) -> Self {
        Self {
            method,
            route,
            action,
        }
    }
}

impl Capability {
    /// A capability that adds nothing yet: the base a declaration fills in
    /// (`..Capability::named("labels")`).
    pub const fn named(name: &'static str) -> Self {
        Self {
            name,
            job_kinds: &[],
            problem_codes: &[],
            settings: &[],
            reseal: None,
            histories: &[],
            cluster_routes: &[],
            organization_key_routes: &[],
        }
    }
}

/// The [`SettingCheck`] of a settings part.
pub fn setting<P: Part>(settings: &Settings) -> Result<(), ConfigError> {
    settings.part::<P>().map(drop)
}
