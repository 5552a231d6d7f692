//! kubectl's access: `kubebyon kubeconfig` writes a kubeconfig holding no
//! credential, whose user runs `kubebyon credential` (a
//! `client.authentication.k8s.io/v1` `exec` plugin); that asks the platform
//! for a token valid minutes, bound to the context's API key, and keeps it in
//! the user's cache until a minute before it expires. Revoking the key (or
//! its user) deletes the token's ServiceAccount: kubectl stops at once where
//! the cluster answers, and at the next renewal otherwise.

use std::path::PathBuf;

use clap::Args;
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    Session,
    client::{self, segment},
    clusters::resolve,
    config::{credential_cache, write_private},
    error::{CliError, Exit},
    model::{Connection, ExecCredential},
    output,
};

/// A cached token is used while it has more than this left.
const RENEW_BEFORE_SECONDS: i64 = 60;

#[derive(Debug, Args)]
pub struct KubeconfigArgs {
    cluster: String,
    /// Write it to this file (mode 0600) instead of standard output.
    #[arg(long, short = 'f')]
    file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CredentialArgs {
    /// The cluster's id (as the kubeconfig names it) or its name.
    cluster: String,
}

pub async fn kubeconfig(session: &Session, args: KubeconfigArgs) -> Result<(), CliError> {
    let client = session.signed_in()?;
    let cluster = resolve(&client, &args.cluster).await?;
    let connection: Connection = client::read(
        &client
            .get(&format!(
                "/api/console/clusters/{}/connection",
                segment(&cluster.id)
            ))
            .await?,
    )?;
    let program = std::env::current_exe()
        .ok()
        .and_then(|p| p.to_str().map(str::to_string))
        .unwrap_or_else(|| "kubebyon".into());
    let mut exec_args = vec!["credential".to_string(), cluster.id.clone()];
    if let Some(context) = &session.context_name {
        exec_args.extend(["--context".to_string(), context.clone()]);
    }
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": cluster.name, "cluster": {
            "server": connection.server,
            "certificate-authority-data": connection.certificate_authority_data,
        }}],
        "users": [{ "name": format!("{}-kubebyon", cluster.name), "user": { "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": program,
            "args": exec_args,
            "interactiveMode": "Never",
            "provideClusterInfo": false,
            "installHint": "kubebyon is the KubeBYON command line: `cargo install --path cli` in the platform's repository",
        }}}],
        "contexts": [{ "name": cluster.name, "context": {
            "cluster": cluster.name,
            "user": format!("{}-kubebyon", cluster.name),
        }}],
        "current-context": cluster.name,
    });
    let text = serde_saphyr::to_string(&kubeconfig)
        .map_err(|e| CliError::new(Exit::Failure, format!("cannot write YAML: {e}")))?;
    match args.file {
        Some(path) => {
            write_private(&path, text.as_bytes())?;
            note!(
                "Wrote {}: kubectl renews its token through `kubebyon credential`.\n  export KUBECONFIG={}",
                path.display(),
                path.display()
            );
            Ok(())
        }
        None => output::write_stdout(&text),
    }
}

pub async fn credential(session: &Session, args: CredentialArgs) -> Result<(), CliError> {
    let client = session.signed_in()?;
    let context = session.context_name.as_deref().unwrap_or("default");
    let cache = credential_cache(context, &args.cluster)?;
    if let Some(cached) = cached(&cache, session.context.api_key.as_deref()) {
        return output::write_stdout(&cached);
    }
    let cluster_id = if args.cluster.parse::<uuid::Uuid>().is_ok() {
        args.cluster.clone()
    } else {
        resolve(&client, &args.cluster).await?.id
    };
    let answer = client
        .call(
            Method::POST,
            &format!(
                "/api/console/clusters/{}/exec-credentials",
                segment(&cluster_id)
            ),
            None,
        )
        .await?;
    let _: ExecCredential = answer.read()?;
    let text = serde_json::to_string(&answer.body).expect("JSON") + "\n";
    let entry = json!({
        "key_prefix": key_prefix(session.context.api_key.as_deref()),
        "credential": answer.body,
    });
    write_private(&cache, entry.to_string().as_bytes())?;
    output::write_stdout(&text)
}

/// The start of a key (`kb_` and 8 hex digits): what a cached token records
/// of the key it was issued to, so a new sign-in does not reuse it.
fn key_prefix(key: Option<&str>) -> Option<String> {
    key.and_then(|k| k.get(..11)).map(str::to_string)
}

/// The cached credential, when it was issued to this key and has more than
/// a minute left.
fn cached(path: &std::path::Path, key: Option<&str>) -> Option<String> {
    let entry: Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    if entry["key_prefix"].as_str() != key_prefix(key).as_deref() {
        return None;
    }
    let credential: ExecCredential = serde_json::from_value(entry["credential"].clone()).ok()?;
    let expires =
        chrono::DateTime::parse_from_rfc3339(&credential.status.expirationTimestamp).ok()?;
    let left = expires.with_timezone(&chrono::Utc) - chrono::Utc::now();
    (left.num_seconds() > RENEW_BEFORE_SECONDS)
        .then(|| serde_json::to_string(&entry["credential"]).expect("JSON") + "\n")
}
