//! End-to-end tests: real PostgreSQL (`DATABASE_URL`), real RabbitMQ
//! (`AMQP_URL`), and the workspace's own binaries.

mod accounts;
mod admission;
mod api;
mod backbone;
mod billing;
mod broker;
mod clusters;
mod console;
mod contract;
mod dns;
mod faults;
mod hostile_input;
mod idempotency;
mod ingress;
mod journey;
mod kubeconfigs;
mod lambda;
mod lambda_journey;
mod local_process;
mod metrics;
mod nodes;
mod notifications;
mod openapi;
mod outages;
mod plans_and_connections;
mod platform;
mod pool;
mod postgres_tls;
mod quickstart;
mod rehearsal;
mod routing;
mod schema;
mod security_regressions;
mod simulator;
mod traces;
