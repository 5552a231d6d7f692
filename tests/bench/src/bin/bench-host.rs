//! A simulated k3s host cluster as a process of its own, for benchmarks that
//! run the platform's functions as separate processes (the soak).
//!
//! Usage: `bench-host KUBECONFIG_PATH`: starts the Kubernetes API simulator
//! playing a host, writes a kubeconfig for it to the path and serves until
//! killed.

use anyhow::Context;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .context("usage: bench-host KUBECONFIG_PATH")?;
    let host = kube_sim::Simulator::start(kube_sim::Options::host()).await?;
    std::fs::write(&path, host.kubeconfig(None)).with_context(|| format!("write {path}"))?;
    tokio::signal::ctrl_c().await?;
    Ok(())
}
