//! Running a command in a control-plane pod (`pods/exec`).

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, api::AttachParams};

use super::{HostCluster, HostError};
use crate::clusters::Cluster;

impl HostCluster {
    /// Runs `command` in a container of a pod of the cluster's namespace (the
    /// `pods/exec` subresource over a WebSocket) and returns what it wrote to
    /// stdout; more than `limit` bytes, or a non-zero exit (with the status the
    /// kubelet sent), is an error.
    pub async fn exec_output(
        &self,
        cluster: &Cluster,
        pod: &str,
        container: &str,
        command: &[&str],
        limit: u64,
    ) -> Result<String, HostError> {
        use tokio::io::AsyncReadExt;

        let api: Api<Pod> = Api::namespaced(self.client.clone(), &cluster.namespace);
        let params = AttachParams::default()
            .container(container)
            .stdin(false)
            .stdout(true)
            .stderr(false);
        let mut process = api.exec(pod, command.iter().copied(), &params).await?;
        let mut stdout = process
            .stdout()
            .ok_or_else(|| HostError::Transport("the exec stream has no stdout".into()))?;
        let status = process
            .take_status()
            .ok_or_else(|| HostError::Transport("the exec stream has no status".into()))?;
        let mut output = Vec::new();
        (&mut stdout)
            .take(limit)
            .read_to_end(&mut output)
            .await
            .map_err(|e| HostError::Transport(format!("reading the command's output: {e}")))?;
        if output.len() as u64 >= limit {
            process.abort();
            return Err(HostError::Invalid(format!(
                "`{}` in {pod}/{container} wrote more than {limit} bytes",
                command.first().copied().unwrap_or_default()
            )));
        }
        drop(stdout);
        let status = status.await;
        process
            .join()
            .await
            .map_err(|e| HostError::Transport(format!("the exec stream: {e}")))?;
        match status {
            None => Err(HostError::Transport(
                "the exec stream ended without the command's status".into(),
            )),
            Some(status) if status.status.as_deref() != Some("Success") => {
                Err(HostError::Invalid(format!(
                    "`{}` in {pod}/{container} failed: {}",
                    command.first().copied().unwrap_or_default(),
                    status.message.as_deref().unwrap_or("no message")
                )))
            }
            Some(_) => String::from_utf8(output)
                .map_err(|_| HostError::Invalid("the command's output is not UTF-8".into())),
        }
    }
}
