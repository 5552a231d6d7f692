//! TLS observation of hostname bindings: where cert-manager runs in a cluster,
//! each binding follows the `Certificate` whose `dnsNames` hold its hostname —
//! `ready` when it is Ready, `error` with the reason when it is not, `pending`
//! before it has a verdict. Without cert-manager (no Certificate API) bindings
//! stay `none`.

use kube::{
    Api, Client,
    api::{DynamicObject, ListParams},
    core::{ApiResource, GroupVersionKind},
};
use serde_json::Value;
use sqlx::PgPool;

use shared::{
    clusters::Cluster,
    domain::{TlsMode, TlsStatus},
    host::HostError,
    ingress::records::{self, BindingName, TlsState},
};

/// The state of the certificate covering `hostname`, from the Certificates listed.
pub fn state_for(hostname: &str, certificates: &[DynamicObject]) -> TlsState {
    let covering = certificates.iter().find(|c| {
        c.data["spec"]["dnsNames"]
            .as_array()
            .is_some_and(|names| names.iter().any(|n| n.as_str() == Some(hostname)))
    });
    let Some(certificate) = covering else {
        return TlsState {
            mode: TlsMode::None,
            status: TlsStatus::None,
            secret_name: None,
            error: None,
        };
    };
    let secret_name = certificate.data["spec"]["secretName"]
        .as_str()
        .map(str::to_string);
    let ready = certificate.data["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or(Value::Null);
    let (status, error) = match ready["status"].as_str() {
        Some("True") => (TlsStatus::Ready, None),
        Some("False") => (
            TlsStatus::Error,
            Some(format!(
                "{}: {}",
                ready["reason"].as_str().unwrap_or("NotReady"),
                ready["message"].as_str().unwrap_or_default()
            )),
        ),
        _ => (TlsStatus::Pending, None),
    };
    TlsState {
        mode: TlsMode::CertManager,
        status,
        secret_name,
        error,
    }
}

/// Lists the cluster's Certificates; `None` when cert-manager is not installed.
async fn certificates(client: &Client) -> Result<Option<Vec<DynamicObject>>, HostError> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate"),
        "certificates",
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    match api
        .list(&ListParams::default())
        .await
        .map_err(HostError::from)
    {
        Ok(list) => Ok(Some(list.items)),
        Err(HostError::Api { code: 404, .. }) => Ok(None),
        Err(err) => Err(err),
    }
}

/// Updates the TLS state of the cluster's live `bindings`.
pub async fn observe(
    pool: &PgPool,
    cluster: &Cluster,
    bindings: &[BindingName],
    client: &Client,
) -> Result<(), sqlx::Error> {
    if bindings.is_empty() {
        return Ok(());
    }
    let listed = match certificates(client).await {
        Ok(listed) => listed.unwrap_or_default(),
        Err(error) => {
            tracing::info!(cluster_id = %cluster.id, %error, "could not list certificates");
            return Ok(());
        }
    };
    for binding in bindings {
        records::record_tls(pool, binding.id, &state_for(&binding.hostname, &listed)).await?;
    }
    Ok(())
}
