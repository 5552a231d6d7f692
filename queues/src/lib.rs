//! The job transport. RabbitMQ carries wake-ups (job ids) between the HTTP
//! functions, `sweep` and the job functions; `cluster_jobs` stays the truth.
//! Without a broker, the in-process dispatcher honours the same contract.

pub mod amqp;
pub mod inprocess;
pub mod lambda;
pub mod runtime;

pub use amqp::{AmqpPublisher, Consumer, Topology};
pub use inprocess::{InProcessDispatcher, InProcessRunner};
