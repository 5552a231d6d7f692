//! KubeBYON's shared library: everything the functions have in common.

pub mod auth;
pub mod config;
pub mod db;
pub mod dns;
pub mod dnsproof;
pub mod domain;
pub mod error;
pub mod extract;
pub mod host;
pub mod http;
pub mod ingress;
pub mod jobs;
pub mod jointoken;
pub mod kubecred;
pub mod mail;
pub mod nodesync;
pub mod openapi;
pub mod outbound;
pub mod runtime;
pub mod secretbox;
pub mod telemetry;
pub mod tls;

pub use db::MIGRATOR;
