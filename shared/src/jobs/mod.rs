//! The job backbone: handlers, the worker that claims, runs and finishes jobs,
//! the transport-neutral publisher contract, and the sweep.

mod error;
mod publish;
mod retry;
pub mod stage;
mod store;
mod sweep;
mod worker;

pub use error::{Failure, JobError, StepError, Unavailable};
pub use publish::{
    JobPublisher, PublishError, connect_in_background, enqueue_when_idle, enqueue_when_idle_with,
    publish_after_commit,
};
pub use retry::retry_delay;
pub use stage::{STAGES, Stage};
pub use sweep::{SweepReport, sweep, sweep_on};
pub use worker::{Finished, JobContext, JobHandler, Processed, TypedJobHandler, Worker};

pub use store::*;
