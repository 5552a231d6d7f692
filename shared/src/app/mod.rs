//! Rules that span capabilities, written once (docs/architecture.md, "The
//! shared crate"): this layer sits above the capability modules, which never
//! use each other, and below the HTTP application layer and the functions.
//!
//! - [`capabilities`]: every capability's declaration, collected (its job
//!   kinds, problem codes, settings parts and sealed secrets);
//! - [`plan`]: the plan check every addition to a limited resource goes
//!   through (billing's entitlements, notifications' notice of a refusal);
//! - [`authority`]: the one rule between issuing a credential and revoking
//!   what it rests on (a lock on the user's row, shared by issues and
//!   exclusive for revocations);
//! - [`credentials`]: ending a user's credentials at once (accounts'
//!   sessions, API keys and device sign-ins, kubeconfigs, join tokens,
//!   invitations sent);
//! - [`membership`]: who is in an organisation (tenancy), and the
//!   kubeconfigs a member who goes loses;
//! - [`config`]: every capability's own settings, checked as a process starts;
//! - [`retention`]: how long each history is kept, and its pruning (nodes'
//!   events, the audit stream, accounts' sign-ins, the job queue's finished
//!   jobs);
//! - [`settings`]: every stored settings part re-sealed under a new key at once;
//! - [`health`]: a cluster's control plane and its nodes rolled up into its
//!   health (clusters, nodes).

pub mod authority;
pub mod capabilities;
pub mod config;
pub mod credentials;
pub mod health;
pub mod membership;
pub mod plan;
pub mod retention;
pub mod settings;
