//! `job-database-converge`: brings each of a cluster's tenant databases
//! (docs/databases.md) to what its record asks, on its PostgreSQL instance,
//! as the instance's admin role. One job serves every record of the
//! cluster that is not settled, however many were asked for at once.
//!
//! A database walks `planned` → `credential_created` → `role_created` →
//! `database_created` → `secret_projected` → `ready`; the extensions it
//! asks for are made, as its own role, on the way to `secret_projected`. The phase is the
//! checkpoint: each step is safe to run again, is followed by a read-back
//! (the catalog for roles and databases, the cluster's API for the Secret)
//! before the phase advances, and a run resumes at the recorded phase,
//! redoing whatever the last one may have left half done. Before the role
//! or the database is made, the instance's ownership registry records that
//! this platform makes it for this record; a role or database of the name
//! that the registry does not prove is this record's is a `conflict`,
//! named, and never altered, adopted or dropped. `ready` only once the
//! credential has logged in to its database over the instance's TLS mode.
//!
//! Removal follows the record's policy: `retain` removes the Secret and
//! forgets the record, leaving role and database; `delete` checks the
//! registry again, removes the Secret, ends the database's sessions, drops
//! the database and the role and their registry rows, then forgets it.
//! A failure stops the record in `failed` with the reason and the phase it
//! stopped at; the other records go on.

use std::sync::Arc;

use async_trait::async_trait;
use base64::{Engine, engine::general_purpose::STANDARD};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams},
};
use secrecy::{ExposeSecret, SecretString};
use shared::{
    clusters::{self, Cluster},
    databases::{
        instances::{self, AdminConnection, AdminConnections, Instance},
        records::{
            self, DatabaseConvergence, DeletionPolicy, PASSWORD_COLUMN, Phase, TenantDatabase,
            condition,
        },
        server::{self, Kind, Owner},
    },
    domain::FailureCode,
    host::{FIELD_MANAGER, HostCluster},
    jobs::{ClaimedJob, Finished, JobContext, JobError, Stage, TypedJobHandler},
    secretbox::SecretBox,
};
use sqlx::{Connection, PgConnection};
use tokio::sync::OnceCell;
use uuid::Uuid;

pub const NO_HOST_ADAPTER: &str =
    "cannot converge databases: no host cluster adapter is configured on this platform";

pub struct ConvergeDatabases {
    host: Option<Arc<HostCluster>>,
    key: Option<Arc<SecretBox>>,
}

impl ConvergeDatabases {
    pub fn new(host: Option<Arc<HostCluster>>, key: Option<Arc<SecretBox>>) -> Self {
        Self { host, key }
    }
}

// The stages this job records.
shared::stages! {
    CONVERGING = "converging the cluster's databases";
}

#[async_trait]
impl TypedJobHandler for ConvergeDatabases {
    type Payload = DatabaseConvergence;

    fn stages(&self) -> Vec<Stage> {
        STAGES.to_vec()
    }

    async fn run(&self, ctx: &JobContext, _: DatabaseConvergence) -> Result<Finished, JobError> {
        let host = ctx.require(&self.host, NO_HOST_ADAPTER).await?;
        let Some(key) = &self.key else {
            return Err(JobError::fatal(
                FailureCode::InvalidConfiguration,
                "KUBEBYON_SETTINGS_KEY is not set: database credentials are sealed with it",
            ));
        };
        let Some(cluster) = clusters::get(&ctx.pool, ctx.job.cluster_id).await? else {
            return ctx.complete_alone().await;
        };
        ctx.stage(CONVERGING).await?;
        let install_id = records::install_id(&ctx.pool).await?;
        let converger = Converger {
            pool: &ctx.pool,
            job: &ctx.job,
            host,
            key,
            cluster: &cluster,
            install_id,
            client: OnceCell::new(),
        };
        let mut admins = AdminConnections::new(&ctx.pool, key);
        for record in records::unsettled(&ctx.pool, cluster.id).await? {
            let from = record.phase;
            let Err(stop) = converger.converge(&record, &mut admins).await else {
                continue;
            };
            let (phase, reason, message) = match &stop {
                Stop::LeaseLost => return Err(JobError::LeaseLost),
                Stop::Conflict(message) => (Phase::Conflict, "Conflict", message.clone()),
                Stop::Failed(message) => (Phase::Failed, "Failed", message.clone()),
            };
            tracing::warn!(database_id = %record.id, ?phase, message, "database stopped");
            let resume = records::phase_of(&ctx.pool, record.id)
                .await?
                .unwrap_or(from);
            let written = records::record_phase(
                &ctx.pool,
                &ctx.job,
                record.id,
                phase,
                &condition("Ready", false, reason, &message),
                Some(&message),
                Some(resume),
            )
            .await?;
            if !written {
                return Err(JobError::LeaseLost);
            }
        }
        admins.close().await;
        ctx.complete_alone().await
    }
}

/// Why a record stopped.
#[derive(Debug)]
enum Stop {
    /// An object of its name that the registry does not prove is its own.
    Conflict(String),
    /// Anything else, in words.
    Failed(String),
    /// The job's lease is another worker's now: nothing more is written.
    LeaseLost,
}

/// A fenced write's answer: `false` is a lost lease.
fn fenced(written: Result<bool, sqlx::Error>, what: &str) -> Result<(), Stop> {
    match written {
        Ok(true) => Ok(()),
        Ok(false) => Err(Stop::LeaseLost),
        Err(err) => Err(Stop::Failed(format!("{what}: {err}"))),
    }
}

fn failed(what: &str) -> impl Fn(sqlx::Error) -> Stop + '_ {
    move |err| Stop::Failed(format!("{what}: {err}"))
}

struct Converger<'a> {
    pool: &'a sqlx::PgPool,
    job: &'a ClaimedJob,
    host: &'a HostCluster,
    key: &'a SecretBox,
    cluster: &'a Cluster,
    install_id: Uuid,
    client: OnceCell<kube::Client>,
}

impl Converger<'_> {
    /// Brings `record` to what it asks, on its instance's admin connection
    /// (made again after a record stops on an error).
    async fn converge(
        &self,
        record: &TenantDatabase,
        admins: &mut AdminConnections<'_>,
    ) -> Result<(), Stop> {
        if record.deleting && record.deletion_policy == DeletionPolicy::Retain {
            // Nothing on the server is touched: it need not even answer.
            self.remove_secret(record).await?;
            return fenced(
                records::forget(self.pool, self.job, record.id).await,
                "forgetting the record",
            );
        }
        let admin = admins.get(record.instance_id).await.map_err(Stop::Failed)?;
        let walked = self.walk(record, admin).await;
        if matches!(walked, Err(Stop::Failed(_))) {
            admins.reset(record.instance_id).await;
        }
        walked
    }

    /// Walks `record` from its phase, or removes it.
    async fn walk(&self, record: &TenantDatabase, admin: &mut AdminConnection) -> Result<(), Stop> {
        let AdminConnection {
            instance,
            connection: admin,
        } = admin;
        let fields = instance.fields();
        let owner = Owner {
            install_id: self.install_id,
            instance_id: instance.id,
            record_id: record.id,
        };
        if record.deleting {
            return self.remove(record, instance, admin, owner).await;
        }
        let mut phase = record.phase;
        loop {
            phase = match phase {
                Phase::Planned => {
                    self.credential(record).await?;
                    Phase::CredentialCreated
                }
                Phase::CredentialCreated => {
                    let password = self.password(record).await?;
                    claim(admin, Kind::Role, &record.role_name, owner).await?;
                    server::ensure_role(admin, &record.role_name, &password)
                        .await
                        .map_err(failed("making the role"))?;
                    if !server::role_exists(admin, &record.role_name)
                        .await
                        .map_err(failed("reading the role back"))?
                    {
                        return Err(Stop::Failed("the role is not in the catalog".into()));
                    }
                    Phase::RoleCreated
                }
                Phase::RoleCreated => {
                    claim(admin, Kind::Database, &record.database_name, owner).await?;
                    server::ensure_database(admin, &record.database_name, &record.role_name)
                        .await
                        .map_err(failed("making the database"))?;
                    if !server::database_exists(admin, &record.database_name)
                        .await
                        .map_err(failed("reading the database back"))?
                    {
                        return Err(Stop::Failed("the database is not in the catalog".into()));
                    }
                    Phase::DatabaseCreated
                }
                Phase::DatabaseCreated => {
                    let password = self.password(record).await?;
                    if !record.extensions.is_empty() {
                        let mut owner = login(&fields, record, &password).await?;
                        let made = server::ensure_extensions(&mut owner, &record.extensions).await;
                        // Closed as a client should (the server logs a
                        // connection dropped without a goodbye).
                        let _ = owner.close().await;
                        made.map_err(|e| Stop::Failed(e.to_string()))?;
                    }
                    self.project(record, instance, &password).await?;
                    Phase::SecretProjected
                }
                Phase::SecretProjected => {
                    let password = self.password(record).await?;
                    let mut login = login(&fields, record, &password).await?;
                    let answered = sqlx::query("SELECT 1").execute(&mut login).await;
                    let _ = login.close().await;
                    answered.map_err(failed("the credential's first query"))?;
                    Phase::Ready
                }
                Phase::Ready => return Ok(()),
                // A retried record was set back to the phase it stopped at.
                Phase::Conflict | Phase::Failed | Phase::Deleting => return Ok(()),
            };
            let done = condition(
                "Ready",
                phase == Phase::Ready,
                phase_reason(phase),
                format!("{} reached", phase.as_str()),
            );
            fenced(
                records::record_phase(self.pool, self.job, record.id, phase, &done, None, None)
                    .await,
                "recording the phase",
            )?;
        }
    }

    /// The credential, generated once and sealed.
    async fn credential(&self, record: &TenantDatabase) -> Result<(), Stop> {
        if records::sealed_password(self.pool, record.id)
            .await
            .map_err(failed("reading the credential"))?
            .is_none()
        {
            let password = server::generate_password();
            let sealed = self.key.seal(PASSWORD_COLUMN, password.expose_secret());
            fenced(
                records::store_password(self.pool, self.job, record.id, &sealed).await,
                "storing the credential",
            )?;
        }
        Ok(())
    }

    async fn password(&self, record: &TenantDatabase) -> Result<SecretString, Stop> {
        let sealed = records::sealed_password(self.pool, record.id)
            .await
            .map_err(failed("reading the credential"))?
            .ok_or_else(|| Stop::Failed("the credential is missing".into()))?;
        self.key
            .open(PASSWORD_COLUMN, &sealed)
            .map_err(|e| Stop::Failed(format!("the credential does not open: {e}")))
    }

    /// The cluster's Secrets in the record's namespace, through one client
    /// per run.
    async fn secrets(&self, record: &TenantDatabase) -> Result<Api<Secret>, Stop> {
        let client = self
            .client
            .get_or_try_init(|| async {
                let endpoint = self
                    .cluster
                    .api_endpoint
                    .as_deref()
                    .ok_or_else(|| Stop::Failed("the cluster has no API endpoint".into()))?;
                self.host
                    .vcluster_client(self.cluster, endpoint)
                    .await
                    .map_err(|e| Stop::Failed(format!("could not reach the cluster's API: {e}")))
            })
            .await?;
        Ok(Api::namespaced(client.clone(), &record.namespace))
    }

    /// The credential as a Secret in the cluster, applied and read back.
    async fn project(
        &self,
        record: &TenantDatabase,
        instance: &Instance,
        password: &SecretString,
    ) -> Result<(), Stop> {
        let secrets = self.secrets(record).await?;
        // A Secret of that name the platform did not project for this
        // database is the tenant's: never overwritten.
        if let Some(existing) = secrets
            .get_opt(&record.secret_name)
            .await
            .map_err(|e| Stop::Failed(format!("could not read the Secret: {e}")))?
            && !projected_for(&existing, record)
        {
            return Err(Stop::Failed(format!(
                "a Secret {}/{} exists that the platform did not make for this database: rename or remove it, or ask for another secret_name",
                record.namespace, record.secret_name
            )));
        }
        let sslmode = instance.tls_mode.as_str();
        let mut data = serde_json::json!({
            "host": instance.host,
            "port": instance.port.to_string(),
            "database": record.database_name,
            "username": record.role_name,
            "password": password.expose_secret(),
            "sslmode": sslmode,
            "uri": format!(
                "postgresql://{}:{}@{}:{}/{}?sslmode={sslmode}",
                record.role_name,
                password.expose_secret(),
                instance.host,
                instance.port,
                record.database_name
            ),
        });
        if let Some(hostaddr) = &instance.hostaddr {
            data["hostaddr"] = hostaddr.clone().into();
        }
        if let Some(ca) = &instance.ca_bundle {
            data["ca.crt"] = ca.clone().into();
        }
        // As the API server keeps it: each value base64 in `data`.
        let data: serde_json::Map<String, serde_json::Value> = data
            .as_object()
            .into_iter()
            .flatten()
            .map(|(key, value)| {
                let text = value.as_str().unwrap_or_default();
                (key.clone(), STANDARD.encode(text).into())
            })
            .collect();
        let mut labels = serde_json::json!({"app.kubernetes.io/managed-by": "kubebyon"});
        labels[shared::databases::SECRET_LABEL] = record.id.to_string().into();
        let secret = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": record.secret_name, "namespace": record.namespace,
                         "labels": labels},
            "type": "Opaque",
            "data": data,
        });
        secrets
            .patch(
                &record.secret_name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(secret),
            )
            .await
            .map_err(|e| {
                Stop::Failed(format!(
                    "could not write the Secret {}/{}: {e}",
                    record.namespace, record.secret_name
                ))
            })?;
        let read = secrets
            .get_opt(&record.secret_name)
            .await
            .map_err(|e| Stop::Failed(format!("could not read the Secret back: {e}")))?;
        if read.is_none() {
            return Err(Stop::Failed("the Secret is not in the cluster".into()));
        }
        Ok(())
    }

    /// Removes the credential's Secret from the cluster, if it is there and
    /// is the one projected for this database (its label names the record;
    /// deleted only as read, by its uid): another of that name is left as
    /// it is.
    async fn remove_secret(&self, record: &TenantDatabase) -> Result<(), Stop> {
        let secrets = self.secrets(record).await?;
        let existing = secrets
            .get_opt(&record.secret_name)
            .await
            .map_err(|e| Stop::Failed(format!("could not read the Secret: {e}")))?;
        let Some(existing) = existing.filter(|s| projected_for(s, record)) else {
            return Ok(());
        };
        let params = DeleteParams {
            preconditions: existing
                .metadata
                .uid
                .clone()
                .map(|uid| kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
            ..DeleteParams::default()
        };
        match secrets.delete(&record.secret_name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(Stop::Failed(format!("could not remove the Secret: {e}"))),
        }
    }

    /// Removes a `delete` record: what exists must be proven its own.
    async fn remove(
        &self,
        record: &TenantDatabase,
        instance: &Instance,
        admin: &mut PgConnection,
        owner: Owner,
    ) -> Result<(), Stop> {
        // Whatever exists must be this record's, or nothing is dropped.
        for (kind, name) in [
            (Kind::Database, &record.database_name),
            (Kind::Role, &record.role_name),
        ] {
            if !server::proven(admin, kind, name, owner)
                .await
                .map_err(failed("reading the catalog and the registry"))?
            {
                return Err(Stop::Conflict(format!(
                    "the {} {name} on {} is not registered as this database's: nothing is dropped",
                    kind.as_str(),
                    instance.name
                )));
            }
        }
        self.remove_secret(record).await?;
        server::drop_registered(admin, &record.database_name, &record.role_name, owner)
            .await
            .map_err(failed("dropping the database and the role"))?;
        fenced(
            records::forget(self.pool, self.job, record.id).await,
            "forgetting the record",
        )
    }
}

/// The record's credential logged in to its database, over the instance's
/// TLS mode.
async fn login(
    fields: &instances::InstanceFields,
    record: &TenantDatabase,
    password: &SecretString,
) -> Result<PgConnection, Stop> {
    let options =
        instances::connect_options(fields, &record.role_name, password, &record.database_name);
    instances::connect(&options)
        .await
        .map_err(|e| Stop::Failed(format!("the credential does not log in: {e}")))
}

/// Records in the registry that `owner` makes `kind` `name`, unless the
/// server holds one the registry does not prove is `owner`'s.
async fn claim(admin: &mut PgConnection, kind: Kind, name: &str, owner: Owner) -> Result<(), Stop> {
    let registered = server::registered(admin, kind, name)
        .await
        .map_err(failed("reading the registry"))?;
    let exists = match kind {
        Kind::Database => server::database_exists(admin, name).await,
        Kind::Role => server::role_exists(admin, name).await,
    }
    .map_err(failed("reading the catalog"))?;
    match registered {
        Some(other) if other != owner => Err(Stop::Conflict(format!(
            "the {} {name} is registered to another database (record {}): it is left as it is",
            kind.as_str(),
            other.record_id
        ))),
        None if exists => Err(Stop::Conflict(format!(
            "a {} named {name} exists that the platform did not make: it is left as it is",
            kind.as_str()
        ))),
        Some(_) => Ok(()),
        None => {
            let now = server::register(admin, kind, name, owner)
                .await
                .map_err(failed("updating the registry"))?;
            if now == owner {
                Ok(())
            } else {
                Err(Stop::Conflict(format!(
                    "the {} {name} was registered to another database meanwhile",
                    kind.as_str()
                )))
            }
        }
    }
}

fn phase_reason(phase: Phase) -> &'static str {
    match phase {
        Phase::Planned => "Planned",
        Phase::CredentialCreated => "CredentialCreated",
        Phase::RoleCreated => "RoleCreated",
        Phase::DatabaseCreated => "DatabaseCreated",
        Phase::SecretProjected => "SecretProjected",
        Phase::Ready => "Ready",
        Phase::Conflict => "Conflict",
        Phase::Failed => "Failed",
        Phase::Deleting => "Deleting",
    }
}

/// Whether `secret` is the one projected for `record`: its label names the
/// record.
fn projected_for(secret: &Secret, record: &TenantDatabase) -> bool {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(shared::databases::SECRET_LABEL))
        .is_some_and(|id| *id == record.id.to_string())
}
