//! `sweep`: the backbone's safety net, run on a schedule. It returns jobs whose
//! worker lease expired to pending (or to failed on their last attempt) and
//! publishes every due job that has no live wake-up, so a committed job is
//! always delivered even when the publish after commit was lost.

use queues::runtime::Platform;
use shared::jobs::{self, JobPublisher, SweepReport};

pub async fn run(platform: &Platform, publisher: &dyn JobPublisher) -> anyhow::Result<SweepReport> {
    Ok(jobs::sweep(&platform.pool, publisher, &platform.settings.jobs).await?)
}
