//! KubeBYON's shared library: everything the functions have in common, in
//! parts that only use the parts below them (docs/architecture.md, "The
//! shared crate"; `scripts/check-modules.py` holds the table).
//!
//! - the kernel: `config`, `error`, `extract`, `domain`, `secretbox`,
//!   `outbound`, `telemetry`, `openapi`, `runtime`, `db` (pool and migrator),
//!   `settings` and `audit`;
//! - the backbone: `jobs`;
//! - the clusters every capability hangs off: `clusters`;
//! - the Kubernetes adapter: `host`;
//! - the capabilities, each with its SQL beside its logic and none using a
//!   sibling: `accounts`, `admission`, `nodes`, `kubeconfigs`, `ingress`, `metrics`,
//!   `billing`, `notifications`;
//! - the rules that span capabilities, written once: `app`;
//! - the HTTP application layer over them: `http`.

pub mod accounts;
pub mod admission;
pub mod app;
pub mod audit;
pub mod billing;
pub mod clusters;
pub mod config;
pub mod db;
pub mod domain;
pub mod error;
pub mod extract;
pub mod host;
pub mod http;
pub mod ingress;
pub mod jobs;
pub mod kubeconfigs;
pub mod mail;
pub mod metrics;
pub mod nodes;
pub mod notifications;
pub mod openapi;
pub mod outbound;
pub mod runtime;
pub mod secretbox;
pub mod settings;
pub mod telemetry;

pub use db::MIGRATOR;
