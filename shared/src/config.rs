//! Typed settings read once from the environment at start.
//!
//! A missing or malformed variable stops the process with an error that names it.
//! Secrets are wrapped in [`SecretString`] so they cannot be printed by accident.

use std::{
    any::{Any, TypeId},
    collections::HashMap,
    fmt,
    str::FromStr,
    sync::{Arc, Mutex},
    time::Duration,
};

use secrecy::{ExposeSecret, SecretString};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("environment variable {name} is required")]
    Missing { name: &'static str },
    #[error("environment variable {name} is invalid: {reason}")]
    Invalid { name: &'static str, reason: String },
}

/// Where variables come from: the process environment in production, a map in tests.
pub trait Source {
    /// The value as set, empty included.
    fn raw(&self, name: &str) -> Option<String>;

    /// The value, an empty one counting as unset.
    fn get(&self, name: &str) -> Option<String> {
        self.raw(name).filter(|v| !v.is_empty())
    }

    /// This source, as [`Settings`] keep it for the capabilities that read
    /// their own variables later.
    fn keep(&self) -> Arc<dyn Source + Send + Sync>;
}

/// The variables the settings were read from: each capability reads its
/// own settings from them (`Settings::environment`). Never printed.
#[derive(Clone)]
pub struct Environment(Arc<dyn Source + Send + Sync>);

impl Source for Environment {
    fn raw(&self, name: &str) -> Option<String> {
        self.0.raw(name)
    }

    fn keep(&self) -> Arc<dyn Source + Send + Sync> {
        self.0.clone()
    }
}

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Environment(..)")
    }
}

/// A capability's own settings: read from the variables the platform's
/// settings were read from, once per process ([`Settings::part`]); a
/// missing or malformed one is an error naming it. `shared::app::config`
/// reads every part as a process starts, so such an error stops it there.
pub trait Part: Sized + Send + Sync + 'static {
    fn read(source: &dyn Source) -> Result<Self, ConfigError>;
}

/// The parts read so far, shared by the clones of one [`Settings`].
#[derive(Clone, Default)]
pub struct Parts(Arc<Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>>);

impl fmt::Debug for Parts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Parts(..)")
    }
}

/// A duration in milliseconds that a variable sets, and its default: a
/// schedule's interval, a capability's own timing.
#[derive(Debug, Clone, Copy)]
pub struct Millis {
    pub name: &'static str,
    pub default: u64,
}

impl Millis {
    pub const fn new(name: &'static str, default: u64) -> Self {
        Self { name, default }
    }

    /// The value in `source`, the default when unset; 0 or malformed is an
    /// error naming the variable.
    pub fn read(&self, source: &dyn Source) -> Result<Duration, ConfigError> {
        positive_millis(source, self.name, self.default)
    }
}

/// The process environment, with the secrets [`fetch_secrets`] fetched.
pub struct ProcessEnv;

impl Source for ProcessEnv {
    fn raw(&self, name: &str) -> Option<String> {
        std::env::var(name)
            .ok()
            .or_else(|| FETCHED.get()?.get(name).cloned())
    }

    fn keep(&self) -> Arc<dyn Source + Send + Sync> {
        Arc::new(ProcessEnv)
    }
}

/// The variables a deployment may give as a Secrets Manager secret instead,
/// in `<NAME>_SECRET_ARN`: the secret's value is the variable's value.
const FETCHABLE: [(&str, &str); 6] = [
    ("DATABASE_URL", "DATABASE_URL_SECRET_ARN"),
    ("AMQP_URL", "AMQP_URL_SECRET_ARN"),
    ("SMTP_URL", "SMTP_URL_SECRET_ARN"),
    ("KUBEBYON_SETTINGS_KEY", "KUBEBYON_SETTINGS_KEY_SECRET_ARN"),
    (
        "KUBEBYON_SETTINGS_KEY_PREVIOUS",
        "KUBEBYON_SETTINGS_KEY_PREVIOUS_SECRET_ARN",
    ),
    // The host cluster's kubeconfig itself, written to a private file.
    (
        "KUBEBYON_HOST_KUBECONFIG",
        "KUBEBYON_HOST_KUBECONFIG_SECRET_ARN",
    ),
];

static FETCHED: tokio::sync::OnceCell<HashMap<String, String>> = tokio::sync::OnceCell::const_new();

/// Fetches, once per process, the secrets named by `<NAME>_SECRET_ARN`
/// variables (see [`FETCHABLE`]) through the AWS Parameters and Secrets
/// Lambda Extension (`localhost:$PARAMETERS_SECRETS_EXTENSION_HTTP_PORT`,
/// 2773 by default, authenticated with the function's `AWS_SESSION_TOKEN`),
/// so secrets reach the function at start, from its own role, and never sit
/// in its configuration. Settings read afterwards see them as variables.
/// A variable set both ways, or a secret that cannot be fetched, is an
/// error naming it.
pub async fn fetch_secrets() -> Result<(), ConfigError> {
    // While this runs nothing is fetched yet: `ProcessEnv` is the
    // environment alone.
    FETCHED
        .get_or_try_init(|| fetch_from(&ProcessEnv))
        .await
        .map(|_| ())
}

async fn fetch_from(source: &dyn Source) -> Result<HashMap<String, String>, ConfigError> {
    let mut fetched = HashMap::new();
    let wanted: Vec<(&'static str, &'static str, String)> = FETCHABLE
        .iter()
        .filter_map(|&(name, arn_name)| Some((name, arn_name, source.get(arn_name)?)))
        .collect();
    if wanted.is_empty() {
        return Ok(fetched);
    }
    let port = source
        .get("PARAMETERS_SECRETS_EXTENSION_HTTP_PORT")
        .unwrap_or_else(|| "2773".into());
    let token = source.get("AWS_SESSION_TOKEN");
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|e| ConfigError::Invalid {
            name: wanted[0].1,
            reason: e.to_string(),
        })?;
    for (name, arn_name, arn) in wanted {
        let invalid = |reason: String| ConfigError::Invalid {
            name: arn_name,
            reason,
        };
        if source.get(name).is_some() {
            return Err(invalid(format!("{name} is set too; set one of them")));
        }
        let mut request = client
            .get(format!("http://localhost:{port}/secretsmanager/get"))
            .query(&[("secretId", arn.as_str())]);
        if let Some(token) = &token {
            request = request.header("X-Aws-Parameters-Secrets-Token", token);
        }
        let response = request.send().await.map_err(|e| {
            invalid(format!(
                "the Parameters and Secrets Lambda Extension on port {port} cannot be reached ({e}); add its layer to the function"
            ))
        })?;
        let status = response.status();
        if !status.is_success() {
            return Err(invalid(format!(
                "Secrets Manager answered {status} for {arn}"
            )));
        }
        let body: serde_json::Value = response
            .json()
            .await
            .map_err(|e| invalid(format!("the secret's answer is not JSON ({e})")))?;
        let value = body["SecretString"]
            .as_str()
            .ok_or_else(|| invalid(format!("{arn} holds no SecretString")))?
            .to_string();
        let value = if name == "KUBEBYON_HOST_KUBECONFIG" {
            write_private_file("kubebyon-host-kubeconfig", &value)
                .map_err(|e| invalid(e.to_string()))?
        } else {
            value
        };
        fetched.insert(name.to_string(), value);
    }
    Ok(fetched)
}

/// Writes `contents` to a file only this user may read, in the temporary
/// directory (under Lambda the only writable one), and answers its path.
/// The name carries the process id: processes sharing a temporary
/// directory (several functions on one machine) each write their own, and
/// none reads another's half-written file.
fn write_private_file(name: &str, contents: &str) -> std::io::Result<String> {
    let name = format!("{name}-{}", std::process::id());
    use std::{
        io::Write,
        os::unix::fs::{OpenOptionsExt, PermissionsExt},
    };
    let path = std::env::temp_dir().join(name);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)?;
    // Also when the file was there before, with another mode.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(contents.as_bytes())?;
    Ok(path.display().to_string())
}

impl Source for HashMap<&str, &str> {
    fn raw(&self, name: &str) -> Option<String> {
        HashMap::get(self, name).map(|v| v.to_string())
    }

    fn keep(&self) -> Arc<dyn Source + Send + Sync> {
        Arc::new(Kept(
            self.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ))
    }
}

/// A map of variables, kept.
struct Kept(HashMap<String, String>);

impl Source for Kept {
    fn raw(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }

    fn keep(&self) -> Arc<dyn Source + Send + Sync> {
        Arc::new(Kept(self.0.clone()))
    }
}

fn parse<T>(source: &dyn Source, name: &'static str) -> Result<Option<T>, ConfigError>
where
    T: FromStr,
    T::Err: fmt::Display,
{
    source
        .get(name)
        .map(|raw| {
            raw.parse().map_err(|e: T::Err| ConfigError::Invalid {
                name,
                reason: e.to_string(),
            })
        })
        .transpose()
}

pub fn parse_or<T>(source: &dyn Source, name: &'static str, default: T) -> Result<T, ConfigError>
where
    T: FromStr,
    T::Err: fmt::Display,
{
    Ok(parse(source, name)?.unwrap_or(default))
}

fn positive_millis(
    source: &dyn Source,
    name: &'static str,
    default: u64,
) -> Result<Duration, ConfigError> {
    let value: u64 = parse_or(source, name, default)?;
    if value == 0 {
        return Err(ConfigError::Invalid {
            name,
            reason: "must be greater than zero".into(),
        });
    }
    Ok(Duration::from_millis(value))
}

fn secret(source: &dyn Source, name: &'static str) -> Option<SecretString> {
    source.get(name).map(SecretString::from)
}

/// Spans exported over OTLP/HTTP (protobuf), named by the standard
/// OpenTelemetry variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceExport {
    /// The full URL spans are posted to (`…/v1/traces`).
    pub endpoint: String,
    /// `OTEL_SERVICE_NAME`, else the Lambda function's name, else the
    /// executable's (`api-clusters`, `local`…).
    pub service_name: String,
}

/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as given, or
/// `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces` appended, as the
/// specification says; none, or `OTEL_SDK_DISABLED=true`: no export. Only
/// `http/protobuf` is built in, so another `OTEL_EXPORTER_OTLP_PROTOCOL` is an
/// error rather than spans silently sent in a form the collector refuses.
fn trace_export(source: &dyn Source) -> Result<Option<TraceExport>, ConfigError> {
    if parse_or(source, "OTEL_SDK_DISABLED", false)? {
        return Ok(None);
    }
    let (name, endpoint) = match (
        source.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        source.get("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ) {
        (Some(traces), _) => ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces),
        (None, Some(base)) => (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("{}/v1/traces", base.trim_end_matches('/')),
        ),
        (None, None) => return Ok(None),
    };
    match url::Url::parse(&endpoint) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {}
        _ => {
            return Err(ConfigError::Invalid {
                name,
                reason: "must be an http:// or https:// URL".into(),
            });
        }
    }
    for protocol in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(value) = source.get(protocol).filter(|v| v != "http/protobuf") {
            return Err(ConfigError::Invalid {
                name: protocol,
                reason: format!("only http/protobuf is supported, got {value:?}"),
            });
        }
    }
    let service_name = source
        .get("OTEL_SERVICE_NAME")
        .or_else(|| source.get("AWS_LAMBDA_FUNCTION_NAME"))
        .or_else(|| {
            std::env::current_exe()
                .ok()?
                .file_name()?
                .to_str()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "kubebyon".into());
    Ok(Some(TraceExport {
        endpoint,
        service_name,
    }))
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line, for deployments.
    Json,
    /// Human-readable lines, for a terminal.
    Pretty,
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "json" => Ok(Self::Json),
            "pretty" => Ok(Self::Pretty),
            other => Err(format!("expected json or pretty, got {other:?}")),
        }
    }
}

/// `KUBEBYON_AUTH_MODE`: `accounts`, or unset. Every deployed function
/// authenticates its callers; the development identity (every request acting
/// as one user) exists only as `local --development`, bound to loopback, so
/// no variable in an image or a template can switch it on. An empty value is
/// an error, not a default.
fn check_auth_mode(source: &dyn Source) -> Result<(), ConfigError> {
    let name = "KUBEBYON_AUTH_MODE";
    match source.raw(name).as_deref() {
        None | Some("accounts") => Ok(()),
        Some("") => Err(ConfigError::Invalid {
            name,
            reason: "is set but empty; unset it (accounts is the only mode)".into(),
        }),
        Some("development") => Err(ConfigError::Invalid {
            name,
            reason: "development is not a deployable mode; run `local --development` on a developer's machine instead".into(),
        }),
        Some(other) => Err(ConfigError::Invalid {
            name,
            reason: format!("expected accounts, got {other:?}"),
        }),
    }
}

/// AWS credentials from the environment.
#[derive(Debug, Clone)]
pub struct AwsCredentials {
    pub access_key_id: String,
    pub secret_access_key: SecretString,
    pub session_token: Option<SecretString>,
}

/// Tuning of the job backbone.
#[derive(Debug, Clone)]
pub struct JobSettings {
    /// How long a claim is valid before `sweep` may hand the job to another worker.
    pub lease: Duration,
    /// Attempts before a retryable failure becomes final.
    pub max_attempts: i32,
    /// First retry delay; doubled for each further attempt.
    pub retry_base: Duration,
    /// Ceiling of the retry delay.
    pub retry_max: Duration,
    /// A pending job published this long ago without being claimed is published again.
    pub republish_after: Duration,
    /// Deliveries a consumer works on at once (RabbitMQ prefetch).
    pub prefetch: u16,
}

impl JobSettings {
    pub fn from_source(source: &dyn Source) -> Result<Self, ConfigError> {
        let max_attempts: i32 = parse_or(source, "JOB_MAX_ATTEMPTS", 5)?;
        if !(1..=100).contains(&max_attempts) {
            return Err(ConfigError::Invalid {
                name: "JOB_MAX_ATTEMPTS",
                reason: "must be between 1 and 100".into(),
            });
        }
        let prefetch: u16 = parse_or(source, "AMQP_PREFETCH", 16)?;
        if prefetch == 0 {
            return Err(ConfigError::Invalid {
                name: "AMQP_PREFETCH",
                reason: "must be greater than zero".into(),
            });
        }
        Ok(Self {
            lease: positive_millis(source, "JOB_LEASE_MS", 60_000)?,
            max_attempts,
            retry_base: positive_millis(source, "JOB_RETRY_BASE_MS", 2_000)?,
            retry_max: positive_millis(source, "JOB_RETRY_MAX_MS", 300_000)?,
            republish_after: positive_millis(source, "JOB_REPUBLISH_AFTER_MS", 300_000)?,
            prefetch,
        })
    }
}

impl Default for JobSettings {
    fn default() -> Self {
        Self::from_source(&HashMap::new()).expect("defaults are valid")
    }
}

/// Settings every function shares.
#[derive(Debug, Clone)]
pub struct Settings {
    pub database_url: Option<SecretString>,
    pub database_max_connections: u32,
    pub amqp_url: Option<SecretString>,
    /// Name of the durable exchange; queues are named `<exchange>.<job type>`.
    pub amqp_exchange: String,
    pub port: u16,
    /// `DATABASE_SESSION_SETTINGS` (default true): whether job workers send
    /// their planner settings at connect (see `db::lazy_pool_with`).
    pub database_session_settings: bool,
    /// `METRICS_PORT`: where a long-running process serves `GET /metrics`
    /// (Prometheus), on its own port so the public routes never expose it.
    /// Unset: not served. Ignored under Lambda.
    pub metrics_port: Option<u16>,
    pub log_format: LogFormat,
    /// Where spans are exported over OTLP, when an endpoint is configured
    /// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub traces: Option<TraceExport>,
    pub worker_id: String,
    /// `KUBEBYON_TRUSTED_PROXY_HOPS` (default 0): how many proxies in front of
    /// the functions append to `X-Forwarded-For`. With 0 the header is ignored
    /// (under API Gateway its request context gives the source address).
    pub trusted_proxy_hops: u8,
    /// `KUBEBYON_REQUEST_TIMEOUT_MS` (default 30 s): a request still running
    /// then is stopped and answered 503 `timed_out`.
    pub request_timeout: Duration,
    /// `KUBEBYON_MAX_CONCURRENT_REQUESTS` (default 256): past it, 503
    /// `overloaded` at once, per process.
    pub max_concurrent_requests: usize,
    /// Base URL of the public `join` function; join commands point under it.
    pub join_base_url: String,
    /// `KUBEBYON_ALLOW_PRIVATE_OUTBOUND` (default false): let the URLs the
    /// platform sends secrets or scripts through be plain HTTP or private
    /// addresses (`shared::outbound`).
    pub allow_private_outbound: bool,
    /// `SMTP_URL`: where mail (email codes) is sent.
    pub smtp_url: Option<SecretString>,
    /// `MAIL_FROM`: the sender of the platform's mail.
    pub mail_from: String,
    /// `KUBEBYON_INSECURE_COOKIES=true` drops `Secure` from cookies: only for
    /// local HTTP.
    pub insecure_cookies: bool,
    /// `KUBEBYON_SETTINGS_KEY`: seals the system settings' secrets.
    pub settings_key: Option<SecretString>,
    /// The function's own AWS credentials (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`: under Lambda, its
    /// execution role's), used for Route53 when the system settings hold no
    /// access key.
    pub aws_credentials: Option<AwsCredentials>,
    /// `KUBEBYON_SETTINGS_KEY_PREVIOUS`: former keys (comma-separated), still
    /// accepted to open secrets while a rotation is under way.
    pub settings_key_previous: Vec<SecretString>,
    /// `KUBEBYON_PUBLIC_BASE_URL`: where the platform's API is reached, when
    /// the system settings do not say (OAuth redirect URIs).
    pub public_base_url: String,
    pub jobs: JobSettings,
    /// The variables these were read from, for the settings a capability
    /// reads itself.
    pub environment: Environment,
    parts: Parts,
}

impl Settings {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_source(&ProcessEnv)
    }

    pub fn from_source(source: &dyn Source) -> Result<Self, ConfigError> {
        check_auth_mode(source)?;
        let deployed = source.get("AWS_LAMBDA_RUNTIME_API").is_some();
        // A Lambda instance serves one event at a time: a few connections
        // (a schedule's lock and its run, a request's transaction and a
        // read beside it) and no more, or a scaled-out fleet of instances
        // exhausts the server's connections.
        let database_max_connections = parse_or(
            source,
            "DATABASE_MAX_CONNECTIONS",
            if deployed { 3u32 } else { 10 },
        )?;
        if database_max_connections == 0 {
            return Err(ConfigError::Invalid {
                name: "DATABASE_MAX_CONNECTIONS",
                reason: "must be greater than zero".into(),
            });
        }
        let amqp_exchange = source
            .get("AMQP_EXCHANGE")
            .unwrap_or_else(|| "kubebyon.jobs".into());
        if !amqp_exchange
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        {
            return Err(ConfigError::Invalid {
                name: "AMQP_EXCHANGE",
                reason: "only letters, digits, '.', '-' and '_' are allowed".into(),
            });
        }
        let default_format = if deployed {
            LogFormat::Json
        } else {
            LogFormat::Pretty
        };
        let port = parse_or(source, "PORT", 8080)?;
        let join_base_url = source
            .get("KUBEBYON_JOIN_BASE_URL")
            .unwrap_or_else(|| format!("http://localhost:{port}"))
            .trim_end_matches('/')
            .to_string();
        let allow_private_outbound = parse_or(source, "KUBEBYON_ALLOW_PRIVATE_OUTBOUND", false)?;
        crate::outbound::check_join_base(&join_base_url, allow_private_outbound).map_err(
            |reason| ConfigError::Invalid {
                name: "KUBEBYON_JOIN_BASE_URL",
                reason,
            },
        )?;
        Ok(Self {
            database_url: secret(source, "DATABASE_URL"),
            database_max_connections,
            amqp_url: secret(source, "AMQP_URL"),
            amqp_exchange,
            port,
            database_session_settings: parse_or(source, "DATABASE_SESSION_SETTINGS", true)?,
            metrics_port: source
                .get("METRICS_PORT")
                .map(|raw| {
                    raw.parse::<u16>()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or(ConfigError::Invalid {
                            name: "METRICS_PORT",
                            reason: "must be a port number (1-65535)".into(),
                        })
                })
                .transpose()?,
            log_format: parse_or(source, "LOG_FORMAT", default_format)?,
            traces: trace_export(source)?,
            worker_id: source.get("WORKER_ID").unwrap_or_else(default_worker_id),
            trusted_proxy_hops: parse_or(source, "KUBEBYON_TRUSTED_PROXY_HOPS", 0u8)?,
            request_timeout: positive_millis(source, "KUBEBYON_REQUEST_TIMEOUT_MS", 30_000)?,
            max_concurrent_requests: match parse_or(
                source,
                "KUBEBYON_MAX_CONCURRENT_REQUESTS",
                256usize,
            )? {
                0 => {
                    return Err(ConfigError::Invalid {
                        name: "KUBEBYON_MAX_CONCURRENT_REQUESTS",
                        reason: "must be greater than zero".into(),
                    });
                }
                n => n,
            },
            join_base_url,
            allow_private_outbound,
            smtp_url: secret(source, "SMTP_URL"),
            mail_from: source
                .get("MAIL_FROM")
                .unwrap_or_else(|| "KubeBYON <noreply@kubebyon.local>".into()),
            insecure_cookies: parse_or(source, "KUBEBYON_INSECURE_COOKIES", false)?,
            public_base_url: source
                .get("KUBEBYON_PUBLIC_BASE_URL")
                .unwrap_or_else(|| format!("http://localhost:{port}"))
                .trim_end_matches('/')
                .to_string(),
            aws_credentials: match (
                source.get("AWS_ACCESS_KEY_ID"),
                secret(source, "AWS_SECRET_ACCESS_KEY"),
            ) {
                (Some(access_key_id), Some(secret_access_key)) => Some(AwsCredentials {
                    access_key_id,
                    secret_access_key,
                    session_token: secret(source, "AWS_SESSION_TOKEN"),
                }),
                _ => None,
            },
            settings_key: match secret(source, "KUBEBYON_SETTINGS_KEY") {
                Some(key) => {
                    crate::secretbox::SecretBox::new(&key).map_err(|e| ConfigError::Invalid {
                        name: "KUBEBYON_SETTINGS_KEY",
                        reason: e.to_string(),
                    })?;
                    Some(key)
                }
                None => None,
            },
            settings_key_previous: match secret(source, "KUBEBYON_SETTINGS_KEY_PREVIOUS") {
                None => Vec::new(),
                Some(_) if source.get("KUBEBYON_SETTINGS_KEY").is_none() => {
                    return Err(ConfigError::Invalid {
                        name: "KUBEBYON_SETTINGS_KEY_PREVIOUS",
                        reason: "needs KUBEBYON_SETTINGS_KEY, the key that replaces them".into(),
                    });
                }
                Some(list) => {
                    let keys: Vec<SecretString> = list
                        .expose_secret()
                        .split(',')
                        .map(|k| SecretString::from(k.trim().to_string()))
                        .collect();
                    for key in &keys {
                        crate::secretbox::SecretBox::new(key).map_err(|_| {
                            ConfigError::Invalid {
                                name: "KUBEBYON_SETTINGS_KEY_PREVIOUS",
                                reason: "each key must be 32 bytes in base64, separated by commas"
                                    .into(),
                            }
                        })?;
                    }
                    keys
                }
            },
            jobs: JobSettings::from_source(source)?,
            environment: Environment(source.keep()),
            parts: Parts::default(),
        })
    }

    /// The capability's own settings `P`, read from [`Settings::environment`]
    /// the first time and kept for every clone of these settings.
    pub fn part<P: Part>(&self) -> Result<Arc<P>, ConfigError> {
        let mut parts = self.parts.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(part) = parts.get(&TypeId::of::<P>()) {
            return Ok(part
                .clone()
                .downcast::<P>()
                .expect("a part is kept under its own type"));
        }
        let part = Arc::new(P::read(&self.environment)?);
        parts.insert(TypeId::of::<P>(), part.clone());
        Ok(part)
    }

    /// What seals the system settings' secrets, when `KUBEBYON_SETTINGS_KEY`
    /// is set (the keys' shapes were checked when the settings were read); it
    /// also opens what the previous keys sealed.
    pub fn secret_box(&self) -> Option<crate::secretbox::SecretBox> {
        self.settings_key.as_ref().and_then(|k| {
            crate::secretbox::SecretBox::new(k)
                .and_then(|b| b.with_previous(&self.settings_key_previous))
                .ok()
        })
    }

    /// The database URL, or the error naming the variable when a function needs it.
    pub fn require_database_url(&self) -> Result<&SecretString, ConfigError> {
        self.database_url.as_ref().ok_or(ConfigError::Missing {
            name: "DATABASE_URL",
        })
    }
}

fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "worker".into());
    format!("{host}-{}-{:04x}", std::process::id(), fastrand::u16(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capability_reads_its_own_variables_from_the_settings_and_they_never_print() {
        let source = HashMap::from([
            ("DATABASE_URL", "postgres://app:hunter2@db/app"),
            ("SOME_CAPABILITY_MS", "250"),
            ("ZERO_MS", "0"),
        ]);
        let settings = Settings::from_source(&source).unwrap();
        let environment = settings.environment.clone();
        drop(settings);
        assert_eq!(
            Millis::new("SOME_CAPABILITY_MS", 1)
                .read(&environment)
                .unwrap(),
            Duration::from_millis(250)
        );
        assert_eq!(
            Millis::new("UNSET_MS", 7).read(&environment).unwrap(),
            Duration::from_millis(7)
        );
        assert!(matches!(
            Millis::new("ZERO_MS", 7).read(&environment),
            Err(ConfigError::Invalid {
                name: "ZERO_MS",
                ..
            })
        ));
        let printed = format!("{:?}", Settings::from_source(&source).unwrap());
        assert!(!printed.contains("hunter2"), "{printed}");
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let settings = Settings::from_source(&HashMap::new()).unwrap();
        assert_eq!(settings.port, 8080);
        assert_eq!(settings.jobs.max_attempts, 5);
        assert_eq!(settings.jobs.lease, Duration::from_secs(60));
        assert!(settings.database_url.is_none());
        assert_eq!(settings.log_format, LogFormat::Pretty);
    }

    #[test]
    fn the_development_identity_cannot_be_switched_on_by_a_variable() {
        for value in ["development", "", "Development", "accounts "] {
            let env = HashMap::from([("KUBEBYON_AUTH_MODE", value)]);
            let err = Settings::from_source(&env).unwrap_err();
            assert!(
                err.to_string().contains("KUBEBYON_AUTH_MODE"),
                "{value:?}: {err}"
            );
        }
        let env = HashMap::from([("KUBEBYON_AUTH_MODE", "accounts")]);
        assert!(Settings::from_source(&env).is_ok());
    }

    #[test]
    fn traces_are_exported_only_where_an_otlp_endpoint_is_named() {
        let traces = |pairs: &[(&'static str, &'static str)]| {
            Settings::from_source(&HashMap::from_iter(pairs.iter().copied())).map(|s| s.traces)
        };
        assert_eq!(traces(&[]).unwrap(), None);
        let base = traces(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            ("OTEL_SERVICE_NAME", "api-clusters"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(base.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(base.service_name, "api-clusters");
        // The per-signal variable is taken as it is, and wins.
        let own = traces(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://traces.example/ingest",
            ),
            ("AWS_LAMBDA_FUNCTION_NAME", "kubebyon-api-nodes"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(own.endpoint, "https://traces.example/ingest");
        assert_eq!(own.service_name, "kubebyon-api-nodes");
        assert_eq!(
            traces(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
                ("OTEL_SDK_DISABLED", "true"),
            ])
            .unwrap(),
            None
        );
        for (bad, named) in [
            (
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")][..],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (
                &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "file:///tmp/x")][..],
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ][..],
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
        ] {
            let err = traces(bad).unwrap_err().to_string();
            assert!(err.contains(named), "{bad:?}: {err}");
        }
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        let env = HashMap::from([("PORT", "eighty")]);
        let err = Settings::from_source(&env).unwrap_err();
        assert!(err.to_string().contains("PORT"), "{err}");

        let env = HashMap::from([("JOB_MAX_ATTEMPTS", "0")]);
        let err = Settings::from_source(&env).unwrap_err();
        assert!(err.to_string().contains("JOB_MAX_ATTEMPTS"), "{err}");

        let env = HashMap::from([("AMQP_EXCHANGE", "bad name")]);
        let err = Settings::from_source(&env).unwrap_err();
        assert!(err.to_string().contains("AMQP_EXCHANGE"), "{err}");
    }

    #[test]
    fn a_lambda_instance_keeps_a_small_pool_unless_told_otherwise() {
        let pool = |env: &[(&'static str, &'static str)]| {
            Settings::from_source(&HashMap::from_iter(env.iter().copied()))
                .unwrap()
                .database_max_connections
        };
        assert_eq!(pool(&[]), 10);
        assert_eq!(pool(&[("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001")]), 3);
        assert_eq!(
            pool(&[
                ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
                ("DATABASE_MAX_CONNECTIONS", "5")
            ]),
            5
        );
    }

    #[test]
    fn a_missing_database_url_names_the_variable() {
        let settings = Settings::from_source(&HashMap::new()).unwrap();
        let err = settings.require_database_url().unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment variable DATABASE_URL is required"
        );
    }

    #[test]
    fn secrets_are_not_printed() {
        let env = HashMap::from([
            ("DATABASE_URL", "postgres://app:hunter2@db/kubebyon"),
            ("AMQP_URL", "amqp://guest:s3cret@mq:5672/%2f"),
        ]);
        let settings = Settings::from_source(&env).unwrap();
        let printed = format!("{settings:?}");
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(!printed.contains("s3cret"), "{printed}");
        assert_eq!(
            settings.database_url.unwrap().expose_secret(),
            "postgres://app:hunter2@db/kubebyon"
        );
    }

    #[test]
    fn lambda_deployments_log_json_by_default() {
        let env = HashMap::from([("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001")]);
        assert_eq!(
            Settings::from_source(&env).unwrap().log_format,
            LogFormat::Json
        );
    }
}
