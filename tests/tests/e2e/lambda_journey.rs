//! The user journey through Lambda: the functions `cargo lambda build`
//! builds (`target/lambda/<binary>/bootstrap`, as `sam build` packages them),
//! each polling `cargo lambda watch`'s Lambda emulator, with the environment
//! the SAM template gives them (their secrets fetched by ARN from a stand-in
//! of the Parameters and Secrets extension). In front, what the template
//! makes: the HTTP API's routes, turned into API Gateway HTTP API (v2)
//! events; the Amazon MQ event source mappings, turned into batches of the
//! queues' messages; the `Migration` custom resource; a scheduled run.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    extract::{Request, State},
    http::StatusCode,
    response::Response,
};
use base64::Engine;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tests::{broker::TestBroker, database::TestDb, eventually, free_port, smtp::SmtpSink};
use tokio::process::{Child, Command};

use crate::{
    harness::{Client, SETTINGS_KEY},
    journey::Journey,
    lambda::{custom_resource, response_url, secrets_extension_for},
    routing::{ApiRoute, sam_backend, sam_routes, sam_template},
};

const DATABASE_ARN: &str =
    "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kubebyon/database-url-AbCdEf";
const AMQP_ARN: &str =
    "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kubebyon/amqp-url-GhIjKl";
const HOST_ARN: &str =
    "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kubebyon/host-kubeconfig-MnOpQr";
const CREDENTIALS_ARN: &str =
    "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kubebyon/host-credentials-EfGhIj";
const KEY_ARN: &str =
    "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kubebyon/settings-key-StUvWx";
const SMTP_ARN: &str =
    "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kubebyon/smtp-url-YzAbCd";

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What `cargo lambda build` made for `binary`.
fn bootstrap(binary: &str) -> PathBuf {
    let path = repository().join(format!("target/lambda/{binary}/bootstrap"));
    assert!(
        path.exists(),
        "{} is missing: scripts/test.sh builds it with cargo lambda build",
        path.display()
    );
    path
}

/// A value of the template (its tags dropped) for the given parameters and
/// conditions: a parameter's name reads as its value, `${Name}` inside a
/// string as well, `[Condition, a, b]` as `a` or `b`; `None` for
/// `AWS::NoValue`.
fn resolve(
    value: &Value,
    parameters: &HashMap<&str, String>,
    conditions: &HashMap<&str, bool>,
) -> Option<String> {
    match value {
        Value::String(s) if s == "AWS::NoValue" => None,
        Value::String(s) => Some(parameters.get(s.as_str()).cloned().unwrap_or_else(|| {
            parameters.iter().fold(s.clone(), |s, (name, value)| {
                s.replace(&format!("${{{name}}}"), value)
            })
        })),
        Value::Array(choice) if choice.len() == 3 => {
            let condition = choice[0].as_str().unwrap();
            let taken = conditions
                .get(condition)
                .unwrap_or_else(|| panic!("condition {condition} is not given"));
            resolve(&choice[if *taken { 1 } else { 2 }], parameters, conditions)
        }
        other => panic!("a template value this test cannot resolve: {other}"),
    }
}

/// One function of the template: its binary, environment and events, and
/// the secrets its role may read.
struct Function {
    binary: String,
    env: HashMap<String, String>,
    events: Vec<Value>,
    readable: std::collections::HashSet<String>,
}

/// The ARNs the managed policies a function names allow
/// `secretsmanager:GetSecretValue` on.
fn readable_secrets(
    template: &Value,
    function: &Value,
    parameters: &HashMap<&str, String>,
    conditions: &HashMap<&str, bool>,
) -> std::collections::HashSet<String> {
    let mut arns = std::collections::HashSet::new();
    for policy in function["Properties"]["Policies"]
        .as_array()
        .into_iter()
        .flatten()
    {
        // A policy's name, or `!If [Condition, name, AWS::NoValue]`.
        let Some(name) = resolve(policy, parameters, conditions) else {
            continue;
        };
        let document = &template["Resources"][name.as_str()]["Properties"]["PolicyDocument"];
        for statement in document["Statement"].as_array().into_iter().flatten() {
            if statement["Action"] != "secretsmanager:GetSecretValue" {
                continue;
            }
            let resource = &statement["Resource"];
            // A list of ARNs, or one (`!If [Condition, a, b]` included).
            let items = match resource.as_array() {
                Some(items)
                    if !items[0]
                        .as_str()
                        .is_some_and(|first| conditions.contains_key(first)) =>
                {
                    items.clone()
                }
                _ => vec![resource.clone()],
            };
            arns.extend(
                items
                    .iter()
                    .filter_map(|item| resolve(item, parameters, conditions)),
            );
        }
    }
    arns
}

fn functions(
    template: &Value,
    parameters: &HashMap<&str, String>,
    conditions: &HashMap<&str, bool>,
) -> Vec<Function> {
    let globals = template["Globals"]["Function"]["Environment"]["Variables"]
        .as_object()
        .unwrap();
    let mut functions = Vec::new();
    for resource in template["Resources"].as_object().unwrap().values() {
        let Some(binary) = resource["Metadata"]["BuildProperties"]["Binary"].as_str() else {
            continue;
        };
        let own = resource["Properties"]["Environment"]["Variables"].as_object();
        let env = globals
            .iter()
            .chain(own.into_iter().flatten())
            .filter_map(|(name, value)| {
                Some((name.clone(), resolve(value, parameters, conditions)?))
            })
            .collect();
        functions.push(Function {
            binary: binary.to_string(),
            readable: readable_secrets(template, resource, parameters, conditions),
            env,
            events: resource["Properties"]["Events"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(_, event)| event.clone())
                .collect(),
        });
    }
    functions
}

/// `cargo lambda watch` serving only the Lambda APIs: functions poll
/// `/.rt/<name>/2018-06-01/runtime/invocation/next`, callers invoke
/// `/2015-03-31/functions/<name>/invocations`.
async fn emulator() -> (Child, u16) {
    let port = free_port();
    let cargo_lambda = Path::new(&tests::moto::python())
        .parent()
        .unwrap()
        .join("cargo-lambda");
    let child = Command::new(&cargo_lambda)
        .args(["lambda", "watch", "--only-lambda-apis", "--ignore-changes"])
        .args(["-A", "127.0.0.1", "-P", &port.to_string()])
        .current_dir(repository())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{} runs: {e}", cargo_lambda.display()));
    eventually(60, "the Lambda emulator to listen", || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
    })
    .await;
    (child, port)
}

/// Invokes `function` through the emulator and answers its response.
async fn invoke(http: &reqwest::Client, emulator: u16, function: &str, event: &Value) -> Value {
    let answer = http
        .post(format!(
            "http://127.0.0.1:{emulator}/2015-03-31/functions/{function}/invocations"
        ))
        .json(event)
        // A function that died at start leaves its invocations waiting.
        .timeout(std::time::Duration::from_secs(60))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{function} answers: {e}"));
    let status = answer.status();
    let error = answer.headers().get("x-amz-function-error").cloned();
    let body = answer.text().await.unwrap();
    assert!(
        status.is_success() && error.is_none(),
        "{function} answered {status} {error:?}: {body}"
    );
    serde_json::from_str(&body).unwrap_or(Value::String(body))
}

/// The HTTP API in front: each request to the function its routes pick, as
/// a payload 2.0 event, and the function's answer back as HTTP.
#[derive(Clone)]
struct HttpApi {
    routes: Arc<Vec<ApiRoute>>,
    emulator: u16,
    http: reqwest::Client,
}

async fn api_gateway(State(api): State<HttpApi>, request: Request) -> Response {
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    let Some(function) = sam_backend(&api.routes, &method, &path) else {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::from(r#"{"message":"Not Found"}"#))
            .unwrap();
    };
    let query = request.uri().query().unwrap_or_default().to_string();
    let mut headers = serde_json::Map::new();
    let mut cookies = Vec::new();
    for (name, value) in request.headers() {
        let value = value.to_str().unwrap().to_string();
        if name == "cookie" {
            cookies.extend(value.split("; ").map(|c| Value::String(c.to_string())));
        } else {
            headers.insert(name.to_string(), Value::String(value));
        }
    }
    let body = axum::body::to_bytes(request.into_body(), 1 << 20)
        .await
        .unwrap();
    let event = json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": query,
        "cookies": cookies,
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012", "apiId": "journey", "stage": "$default",
            "domainName": "journey.execute-api.eu-west-1.amazonaws.com",
            "requestId": uuid::Uuid::new_v4().to_string(),
            "http": { "method": method, "path": path, "protocol": "HTTP/1.1",
                      "sourceIp": "198.51.100.9", "userAgent": "journey" },
            "time": "03/Dec/2026:12:00:00 +0000", "timeEpoch": 1796299200000u64,
        },
        "body": base64::engine::general_purpose::STANDARD.encode(&body),
        "isBase64Encoded": true,
    });
    let answer = invoke(&api.http, api.emulator, &function, &event).await;
    let mut response = Response::builder().status(answer["statusCode"].as_u64().unwrap() as u16);
    for (name, value) in answer["headers"].as_object().into_iter().flatten() {
        response = response.header(name, value.as_str().unwrap());
    }
    for cookie in answer["cookies"].as_array().into_iter().flatten() {
        response = response.header("set-cookie", cookie.as_str().unwrap());
    }
    let body = answer["body"].as_str().unwrap_or_default();
    let body = if answer["isBase64Encoded"] == true {
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap()
    } else {
        body.as_bytes().to_vec()
    };
    response.body(Body::from(body)).unwrap()
}

/// An Amazon MQ event source mapping: the queue's messages, as they come,
/// as batches to the function; the batch acknowledged once it returns.
/// Every `processed` item the function answers is kept.
async fn event_source_mapping(
    queue: String,
    function: String,
    emulator: u16,
    processed: Arc<Mutex<Vec<(String, String)>>>,
) {
    let connection = lapin::Connection::connect(&tests::broker::amqp_url(), Default::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    let mut deliveries = channel
        .basic_consume(
            queue.as_str().into(),
            "event-source-mapping".into(),
            Default::default(),
            Default::default(),
        )
        .await
        .unwrap();
    let http = reqwest::Client::new();
    while let Some(Ok(delivery)) = deliveries.next().await {
        let event = json!({
            "eventSource": "aws:rmq",
            "eventSourceArn": "arn:aws:mq:eu-west-1:123456789012:broker:kubebyon:b-journey",
            "rmqMessagesByQueue": { format!("{queue}::/"): [{
                // Every property, as Amazon MQ writes them (null when unset).
                "basicProperties": {
                    "contentType": delivery.properties.content_type().as_ref().map(|c| c.as_str()),
                    "contentEncoding": null,
                    "headers": {},
                    "deliveryMode": delivery.properties.delivery_mode(),
                    "priority": 0,
                    "correlationId": null,
                    "replyTo": null,
                    "expiration": null,
                    "messageId": delivery.properties.message_id().as_ref().map(|m| m.as_str()),
                    "timestamp": null,
                    "type": null,
                    "userId": null,
                    "appId": null,
                    "clusterId": null,
                    "bodySize": delivery.data.len(),
                },
                "redelivered": delivery.redelivered,
                "data": base64::engine::general_purpose::STANDARD.encode(&delivery.data),
            }]},
        });
        let answer = invoke(&http, emulator, &function, &event).await;
        for item in answer["processed"].as_array().into_iter().flatten() {
            processed.lock().unwrap().push((
                item["job_id"].as_str().unwrap().to_string(),
                item["outcome"].as_str().unwrap().to_string(),
            ));
        }
        delivery.ack(Default::default()).await.unwrap();
    }
}

#[tokio::test]
async fn the_journey_runs_through_the_sam_template_s_functions_under_the_lambda_emulator() {
    let db = TestDb::empty().await;
    let broker = TestBroker::new();
    let mail = SmtpSink::start().await;
    let host = kube_sim::Simulator::start(kube_sim::Options::host())
        .await
        .unwrap();
    let (_emulator, emulator_port) = emulator().await;
    let http = reqwest::Client::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());

    let parameters = HashMap::from([
        ("AmqpExchange", broker.topology.exchange.clone()),
        ("DatabaseUrlSecretArn", DATABASE_ARN.to_string()),
        ("AmqpUrlSecretArn", AMQP_ARN.to_string()),
        ("HostKubeconfigSecretArn", HOST_ARN.to_string()),
        (
            "HostCredentialsKubeconfigSecretArn",
            CREDENTIALS_ARN.to_string(),
        ),
        ("SettingsKeySecretArn", KEY_ARN.to_string()),
        ("SmtpUrlSecretArn", SMTP_ARN.to_string()),
        ("PublicBaseUrl", base.clone()),
        ("JoinBaseUrl", base.clone()),
        ("HostNodeAddress", "127.0.0.1".to_string()),
    ]);
    let conditions = HashMap::from([
        ("HasSettingsKey", true),
        ("HasSmtp", true),
        ("HasCredentialsKubeconfig", true),
        ("HasHostedZone", false),
    ]);
    let template = sam_template();
    let functions = functions(&template, &parameters, &conditions);
    assert!(functions.len() >= 18, "every function of the template");
    // Each function reads what its role allows, and only that: the host's
    // kubeconfig is the jobs' and the observing schedules'; the HTTP
    // functions that read clusters' kubeconfig Secrets have their own.
    let reads = |binary: &str| {
        &functions
            .iter()
            .find(|f| f.binary == binary)
            .unwrap()
            .readable
    };
    for binary in ["job-cluster-create", "sync-nodes"] {
        assert!(
            reads(binary).contains(HOST_ARN) && !reads(binary).contains(CREDENTIALS_ARN),
            "{binary}"
        );
    }
    for binary in ["join", "api-clusters", "api-nodes"] {
        assert!(
            reads(binary).contains(CREDENTIALS_ARN) && !reads(binary).contains(HOST_ARN),
            "{binary}"
        );
    }
    for binary in ["console", "admission", "api-billing", "sweep", "migrate"] {
        assert!(
            !reads(binary).contains(HOST_ARN) && !reads(binary).contains(CREDENTIALS_ARN),
            "{binary}"
        );
    }
    // The settings key where settings are opened or answers sealed; the
    // mail server's URL where mail is sent.
    for binary in ["api-auth", "api-organizations", "notify"] {
        assert!(
            reads(binary).contains(SMTP_ARN) && reads(binary).contains(KEY_ARN),
            "{binary}"
        );
    }
    for binary in [
        "console",
        "join",
        "admission",
        "job-cluster-create",
        "sync-nodes",
        "sweep",
    ] {
        assert!(
            !reads(binary).contains(SMTP_ARN) && !reads(binary).contains(KEY_ARN),
            "{binary}"
        );
    }
    let (extension, asked) = secrets_extension_for(
        vec![
            (DATABASE_ARN, db.url.clone()),
            (AMQP_ARN, tests::broker::amqp_url()),
            (HOST_ARN, host.kubeconfig(None)),
            (CREDENTIALS_ARN, host.kubeconfig(None)),
            (KEY_ARN, SETTINGS_KEY.to_string()),
            (SMTP_ARN, mail.url()),
        ],
        functions
            .iter()
            .map(|f| (format!("session-{}", f.binary), f.readable.clone()))
            .collect(),
    )
    .await;

    // Each function as Lambda starts it: its own runtime API, its name, the
    // session token the extension checks.
    let _instances: Vec<Child> = functions
        .iter()
        .map(|function| {
            Command::new(bootstrap(&function.binary))
                .env_clear()
                .envs(&function.env)
                .env(
                    "AWS_LAMBDA_RUNTIME_API",
                    format!("http://127.0.0.1:{emulator_port}/.rt/{}", function.binary),
                )
                .env("AWS_LAMBDA_FUNCTION_NAME", &function.binary)
                .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
                .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
                .env("AWS_REGION", "eu-west-1")
                .env("AWS_SESSION_TOKEN", format!("session-{}", function.binary))
                .env(
                    "PARAMETERS_SECRETS_EXTENSION_HTTP_PORT",
                    extension.to_string(),
                )
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .kill_on_drop(true)
                .spawn()
                .unwrap_or_else(|e| panic!("{} starts: {e}", function.binary))
        })
        .collect();

    // The stack's `Migration` custom resource, before anything else.
    let (url, mut answers) = response_url().await;
    invoke(
        &http,
        emulator_port,
        "migrate",
        &custom_resource("Create", &url),
    )
    .await;
    let (_, answer) = answers.recv().await.unwrap();
    assert_eq!(answer["Status"], "SUCCESS", "{answer}");

    // The event source mappings, one per MQ event.
    let processed = Arc::new(Mutex::new(Vec::new()));
    for function in &functions {
        for event in function.events.iter().filter(|e| e["Type"] == "MQ") {
            for queue in event["Properties"]["Queues"].as_array().unwrap() {
                let queue = resolve(queue, &parameters, &conditions).unwrap();
                tokio::spawn(event_source_mapping(
                    queue,
                    function.binary.clone(),
                    emulator_port,
                    processed.clone(),
                ));
            }
        }
    }
    let api = HttpApi {
        routes: Arc::new(sam_routes(&template)),
        emulator: emulator_port,
        http: http.clone(),
    };
    let router = Router::new().fallback(api_gateway).with_state(api);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    // A user registers, builds a cluster, adds a token and a hostname, and
    // deletes it; each job ran once, and one batch item says so.
    let journey = Journey {
        anonymous: Client::http(&base, Duration::from_secs(60)),
        mail: &mail,
        pool: &db.pool,
    };
    let user = journey.sign_up("alice@example.com").await;
    let id = journey.ready_cluster(&user, "through-lambda").await;
    journey.token_and_hostname(&user, &id).await;
    journey.delete(&user, &id).await;
    // A job commits before its function answers the batch: wait for the
    // answers before counting them.
    let jobs = journey.jobs_ran_once().await;
    let runs = |job: &uuid::Uuid, processed: &[(String, String)]| {
        processed
            .iter()
            .filter(|(id, outcome)| *id == job.to_string() && outcome == "succeeded")
            .count()
    };
    let processed = tests::eventually(10, "every job's batch answer", || {
        let processed = processed.lock().unwrap().clone();
        let answered = jobs.iter().all(|job| runs(job, &processed) > 0);
        async move { answered.then_some(processed) }
    })
    .await;
    for job in &jobs {
        assert_eq!(runs(job, &processed), 1, "{job}: {processed:?}");
    }

    // A scheduled run, as EventBridge Scheduler invokes it; and one that
    // finds the schedule's lock held steps aside.
    let summary = invoke(&http, emulator_port, "sweep", &json!({})).await;
    assert!(summary.is_object(), "{summary}");
    let mut lock = db.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(19266, hashtext('schedule:sweep'))")
        .execute(&mut *lock)
        .await
        .unwrap();
    let summary = invoke(&http, emulator_port, "sweep", &json!({})).await;
    assert_eq!(
        summary["skipped"], "another run is in progress",
        "{summary}"
    );
    lock.rollback().await.unwrap();

    // Both kubeconfigs were read, each by the functions whose role allows
    // it (an ARN outside a role is refused, and its function does not start).
    let asked = asked.lock().unwrap().clone();
    assert!(asked.iter().any(|arn| arn == HOST_ARN), "{asked:?}");
    assert!(asked.iter().any(|arn| arn == CREDENTIALS_ARN), "{asked:?}");
}

#[test]
fn template_values_resolve_as_cloudformation_would() {
    let parameters = HashMap::from([
        ("Exchange", "kb.jobs".to_string()),
        ("Key", "arn:k".to_string()),
    ]);
    let conditions = HashMap::from([("HasKey", true), ("HasMail", false)]);
    let resolve = |v: Value| resolve(&v, &parameters, &conditions);
    assert_eq!(resolve(json!("Key")).as_deref(), Some("arn:k"));
    assert_eq!(resolve(json!("json")).as_deref(), Some("json"));
    assert_eq!(
        resolve(json!("${Exchange}.cluster_create")).as_deref(),
        Some("kb.jobs.cluster_create")
    );
    assert_eq!(
        resolve(json!(["HasKey", "Key", "AWS::NoValue"])).as_deref(),
        Some("arn:k")
    );
    assert_eq!(resolve(json!(["HasMail", "Key", "AWS::NoValue"])), None);
}
