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
    host::HostError,
    ingress::{
        records::{self, BindingName},
        tls::state_for,
    },
};

/// Lists the cluster's Certificates; `None` when cert-manager is not installed.
async fn certificates(client: &Client) -> Result<Option<Vec<Value>>, HostError> {
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
        Ok(list) => Ok(Some(list.items.into_iter().map(|c| c.data).collect())),
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
