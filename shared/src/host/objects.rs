//! Objects a capability keeps on the host as data: each applied with
//! server-side apply under the platform's field manager, and those of a
//! kind and label selector no longer wanted deleted.

use k8s_openapi::serde_json::Value;
use kube::{
    Api,
    api::{DeleteParams, DynamicObject, ListParams, Patch},
    core::{ApiResource, GroupVersionKind},
};

use super::{HostCluster, HostError, error::ignore_not_found};

/// One object: its type, where it lives and its whole body.
#[derive(Debug, Clone, PartialEq)]
pub struct HostObject {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub body: Value,
}

/// A resource type by group, version, kind and plural.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

impl Kind {
    pub fn resource(self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group, self.version, self.kind),
            self.plural,
        )
    }

    pub fn api_version(self) -> String {
        match self.group {
            "" => self.version.to_string(),
            group => format!("{group}/{}", self.version),
        }
    }
}

impl HostCluster {
    /// Applies each object, in order.
    pub async fn apply_objects(&self, objects: &[HostObject]) -> Result<(), HostError> {
        for object in objects {
            let api: Api<DynamicObject> = Api::namespaced_with(
                self.client.clone(),
                &object.namespace,
                &object.kind.resource(),
            );
            api.patch(
                &object.name,
                &Self::apply_params(),
                &Patch::Apply(&object.body),
            )
            .await?;
        }
        Ok(())
    }

    /// Deletes the objects of `kind` in `namespace` that `selector` (a label
    /// selector) finds and `keep` does not name; the names it deleted.
    pub async fn prune_objects(
        &self,
        kind: Kind,
        namespace: &str,
        selector: &str,
        keep: &[&str],
    ) -> Result<Vec<String>, HostError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &kind.resource());
        let listed = api.list(&ListParams::default().labels(selector)).await?;
        let mut deleted = Vec::new();
        for name in listed.items.into_iter().filter_map(|o| o.metadata.name) {
            if keep.contains(&name.as_str()) {
                continue;
            }
            ignore_not_found(
                api.delete(&name, &DeleteParams::default())
                    .await
                    .map(|_| ()),
            )?;
            deleted.push(name);
        }
        Ok(deleted)
    }

    /// The addresses of the host's own nodes.
    pub async fn node_addresses(&self) -> Result<Vec<String>, HostError> {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        Ok(nodes
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|n| n.status?.addresses)
            .flatten()
            .map(|a| a.address)
            .collect())
    }

    /// An object, if it exists.
    pub async fn get_object(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, HostError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &kind.resource());
        Ok(api.get_opt(name).await?.map(|o| o.data))
    }

    /// The objects of `kind` in `namespace` that `selector` finds, each
    /// without its metadata.
    pub async fn list_objects(
        &self,
        kind: Kind,
        namespace: &str,
        selector: &str,
    ) -> Result<Vec<Value>, HostError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &kind.resource());
        Ok(api
            .list(&ListParams::default().labels(selector))
            .await?
            .items
            .into_iter()
            .map(|o| o.data)
            .collect())
    }
}
