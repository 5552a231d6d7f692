//! The function binaries under their real Lambda adapters, fed recorded events
//! through a loopback Lambda Runtime API.

use shared::clusters::ClusterCreation;
use std::process::Stdio;

use base64::Engine;
use shared::{
    config::JobSettings,
    db,
    domain::JobPayload,
    jobs::{self, Worker},
};
use tests::{
    broker::TestBroker,
    database::TestDb,
    handlers::{Behaviour, ScriptedHandler, claims_run, create_jobs, enqueue, seed_cluster},
    lambda_runtime_api::{Invocation, RuntimeApi},
    workspace_binary,
};
use tokio::process::{Child, Command};

fn fixture(name: &str) -> serde_json::Value {
    let path = format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture exists"))
        .expect("fixture is JSON")
}

pub(crate) fn spawn_function(name: &str, api: &RuntimeApi, env: &[(&str, &str)]) -> Child {
    let mut command = Command::new(workspace_binary(name));
    command
        .envs(api.env(name))
        .envs(env.iter().copied())
        .env("RUST_LOG", "info")
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    command.spawn().expect("function starts")
}

pub(crate) fn response(invocation: Invocation) -> serde_json::Value {
    match invocation {
        Invocation::Response(value) => value,
        Invocation::Error(error) => panic!("the function reported an error: {error}"),
    }
}

#[tokio::test]
async fn api_clusters_answers_a_recorded_api_gateway_http_api_event() {
    let db = TestDb::new().await;
    let broker = TestBroker::new();
    let api = RuntimeApi::start().await;
    let amqp_url = tests::broker::amqp_url();
    let _function = spawn_function(
        "api-clusters",
        &api,
        &[
            ("DATABASE_URL", &db.url),
            ("AMQP_URL", &amqp_url),
            ("AMQP_EXCHANGE", &broker.topology.exchange),
        ],
    );
    // Deployed functions authenticate every caller: this one with an API key.
    let key = tests::development_api_key(&db.pool, "lambda").await;
    let mut event = fixture("apigw-http-v2-create-cluster.json");
    let anonymous = response(api.invoke(event.clone()).await);
    assert_eq!(anonymous["statusCode"], 401, "{anonymous}");
    event["headers"]["authorization"] = format!("Bearer {key}").into();

    let answer = response(api.invoke(event.clone()).await);
    assert_eq!(answer["statusCode"], 202, "{answer}");
    let body: serde_json::Value =
        serde_json::from_str(answer["body"].as_str().expect("text body")).unwrap();
    assert_eq!(body["cluster"]["name"], "lambda-demo");
    assert_eq!(body["operation"]["type"], "create");
    assert_eq!(body["operation"]["status"], "pending");

    let job_id: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM cluster_jobs WHERE cluster_id = $1::uuid")
            .bind(body["cluster"]["id"].as_str().unwrap())
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let record = jobs::get(&db.pool, job_id).await.unwrap().unwrap();
    assert!(
        record.published_at.is_some(),
        "the wake-up went to RabbitMQ after commit"
    );
    assert_eq!(broker.ready_messages(&ClusterCreation::KIND).await, 1);

    // A malformed body through the same path gets problem+json.
    let mut bad = event;
    bad["body"] = serde_json::Value::String("{\"name\":".into());
    let answer = response(api.invoke(bad).await);
    assert_eq!(answer["statusCode"], 400);
    assert_eq!(
        answer["headers"]["content-type"],
        "application/problem+json"
    );
}

#[tokio::test]
async fn job_cluster_create_handles_a_recorded_amazon_mq_batch() {
    let db = TestDb::new().await;
    let api = RuntimeApi::start().await;
    let cluster = seed_cluster(&db.pool).await;
    let message = enqueue(&db.pool, cluster, ClusterCreation::of, 3).await;
    let _function = spawn_function("job-cluster-create", &api, &[("DATABASE_URL", &db.url)]);

    let mut event = fixture("amazon-mq-rabbitmq-batch.json");
    let item = &mut event["rmqMessagesByQueue"]["kubebyon.jobs.cluster_create::/"][0];
    item["data"] = base64::engine::general_purpose::STANDARD
        .encode(serde_json::to_vec(&message).unwrap())
        .into();
    item["basicProperties"]["messageId"] = message.job_id.to_string().into();

    let answer = response(api.invoke(event.clone()).await);
    assert_eq!(
        answer["batchItemFailures"],
        serde_json::json!([]),
        "{answer}"
    );
    assert_eq!(answer["processed"][0]["job_id"], message.job_id.to_string());
    assert_eq!(answer["processed"][0]["outcome"], "failed");
    let record = jobs::get(&db.pool, message.job_id).await.unwrap().unwrap();
    assert_eq!(record.status, "failed");
    assert_eq!(
        record.last_error.as_deref(),
        Some(job_cluster_create::NO_HOST_ADAPTER)
    );

    // The broker redelivers the same batch: the job is not run again.
    let answer = response(api.invoke(event.clone()).await);
    assert_eq!(answer["processed"][0]["outcome"], "skipped");

    // An undecodable message is reported per item, not by failing the batch.
    event["rmqMessagesByQueue"]["kubebyon.jobs.cluster_create::/"][0]["data"] =
        "bm90IGpzb24=".into();
    let answer = response(api.invoke(event).await);
    assert_eq!(
        answer["batchItemFailures"][0]["itemIdentifier"],
        message.job_id.to_string()
    );
}

/// The wake-ups of one Amazon MQ batch are claimed together and their jobs
/// run side by side: the second job of the batch ends while the first, a slow
/// one, still works.
#[tokio::test]
async fn the_jobs_of_an_amazon_mq_batch_run_together() {
    let db = TestDb::new().await;
    let url = secrecy::SecretString::from(db.url.clone());
    // One connection, so the count of claims below is every claim's.
    let pool = db::lazy_pool(&url, 1, db::Workload::Jobs).unwrap();
    let handler = ScriptedHandler::new(
        ClusterCreation::KIND,
        Behaviour::SlowFirstCompleteAlone(std::time::Duration::from_secs(2)),
    );
    let worker = Worker::new(
        pool.clone(),
        JobSettings::default(),
        "lambda",
        vec![handler],
    );
    let messages = create_jobs(&db.pool, 2).await;
    let mut event = fixture("amazon-mq-rabbitmq-batch.json");
    let queue = &mut event["rmqMessagesByQueue"]["kubebyon.jobs.cluster_create::/"];
    let template = queue[0].clone();
    *queue = messages
        .iter()
        .map(|message| {
            let mut item = template.clone();
            item["data"] = base64::engine::general_purpose::STANDARD
                .encode(serde_json::to_vec(message).unwrap())
                .into();
            item["basicProperties"]["messageId"] = message.job_id.to_string().into();
            item
        })
        .collect();
    let event = serde_json::from_value(event).expect("an Amazon MQ event");

    let answer = queues::lambda::handle_batch(&worker, event).await;
    assert!(answer.batch_item_failures.is_empty(), "{answer:?}");
    let outcomes: Vec<_> = answer
        .processed
        .iter()
        .map(|p| (p.job_id, p.outcome.as_str()))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (messages[0].job_id, "succeeded"),
            (messages[1].job_id, "succeeded")
        ]
    );
    let mut finished = Vec::new();
    for message in &messages {
        let record = jobs::get(&db.pool, message.job_id).await.unwrap().unwrap();
        finished.push(record.finished_at.expect("finished"));
    }
    assert!(
        finished[1] < finished[0],
        "the quick job ended before the slow one"
    );
    assert_eq!(claims_run(&pool).await, 1, "claim statements for the batch");
}

/// A recorded API Gateway event, turned into `POST path` with a JSON body.
pub(crate) fn post_event(path: &str, body: serde_json::Value) -> serde_json::Value {
    let mut event = fixture("apigw-http-v2-create-cluster.json");
    event["rawPath"] = path.into();
    event["requestContext"]["http"]["path"] = path.into();
    let body = body.to_string();
    event["headers"]["content-length"] = body.len().to_string().into();
    event["body"] = body.into();
    event
}

#[tokio::test]
async fn under_lambda_a_code_request_answers_at_the_same_time_for_real_and_unknown_addresses() {
    let db = TestDb::new().await;
    let broker = TestBroker::new();
    let mail = tests::smtp::SmtpSink::start().await;
    let api = RuntimeApi::start().await;
    let amqp_url = tests::broker::amqp_url();
    let smtp_url = mail.url();
    let _function = spawn_function(
        "api-auth",
        &api,
        &[
            ("DATABASE_URL", &db.url),
            ("AMQP_URL", &amqp_url),
            ("AMQP_EXCHANGE", &broker.topology.exchange),
            ("SMTP_URL", &smtp_url),
            ("KUBEBYON_CODE_ANSWER_MS", "1500"),
        ],
    );
    sqlx::query(
        "INSERT INTO users (email, display_name, password_hash, email_verified_at)
         VALUES ('real@example.com', 'Real', 'x', now())",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let floor = std::time::Duration::from_millis(1500);
    // The first invocation also pays the function's start.
    for email in [
        "unknown@example.com",
        "real@example.com",
        "unknown@example.com",
    ] {
        let started = std::time::Instant::now();
        let answer = response(
            api.invoke(post_event(
                "/api/auth/password-reset",
                serde_json::json!({ "email": email }),
            ))
            .await,
        );
        let took = started.elapsed();
        assert_eq!(answer["statusCode"], 202, "{answer}");
        assert!(
            took >= floor,
            "{email} answered after {took:?}, before the {floor:?} every code request takes"
        );
    }
    // The real address got its code inside the request.
    assert_eq!(mail.code_for("real@example.com").await.len(), 6);
    assert!(
        mail.messages()
            .iter()
            .all(|m| !m.contains("unknown@example.com")),
        "nothing went to the unknown address"
    );
}

/// A stand-in for the AWS Parameters and Secrets Lambda Extension: answers
/// `GET /secretsmanager/get?secretId=<arn>` with the secret's `SecretString`
/// when the request carries the function's session token, as the extension
/// does; records every secret asked for.
pub(crate) async fn secrets_extension(
    secrets: Vec<(&'static str, String)>,
) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let everything = secrets.iter().map(|(arn, _)| arn.to_string()).collect();
    secrets_extension_for(
        secrets,
        std::collections::HashMap::from([("session-token".to_string(), everything)]),
    )
    .await
}

/// [`secrets_extension`] for functions of their own roles: each presents
/// its session token and may read the ARNs `allowed` lists for it (IAM's
/// answer otherwise: AccessDeniedException).
pub(crate) async fn secrets_extension_for(
    secrets: Vec<(&'static str, String)>,
    allowed: std::collections::HashMap<String, std::collections::HashSet<String>>,
) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use axum::{
        extract::Query,
        http::{HeaderMap, StatusCode},
        routing::get,
    };
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    let app = axum::Router::new().route(
        "/secretsmanager/get",
        get(
            move |headers: HeaderMap,
                  Query(query): Query<std::collections::HashMap<String, String>>| {
                let secrets = secrets.clone();
                let seen = seen.clone();
                let allowed = allowed.clone();
                async move {
                    let id = query.get("secretId").cloned().unwrap_or_default();
                    seen.lock().unwrap().push(id.clone());
                    let Some(readable) = headers
                        .get("x-aws-parameters-secrets-token")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|token| allowed.get(token))
                    else {
                        return (
                            StatusCode::UNAUTHORIZED,
                            axum::Json(serde_json::json!({"message": "bad token"})),
                        );
                    };
                    if !readable.contains(&id) {
                        return (
                            StatusCode::BAD_REQUEST,
                            axum::Json(serde_json::json!({"__type": "AccessDeniedException",
                                "message": format!("not authorized to perform: secretsmanager:GetSecretValue on resource: {id}")})),
                        );
                    }
                    match secrets.iter().find(|(arn, _)| *arn == id) {
                        Some((arn, value)) => (
                            StatusCode::OK,
                            axum::Json(serde_json::json!({ "ARN": arn, "SecretString": value })),
                        ),
                        None => (
                            StatusCode::BAD_REQUEST,
                            axum::Json(serde_json::json!({"__type": "ResourceNotFoundException"})),
                        ),
                    }
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, asked)
}

#[tokio::test]
async fn a_function_fetches_its_secrets_at_start_from_the_arns_it_is_given() {
    const DB_ARN: &str =
        "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kubebyon/database-AbCdEf";
    const MQ_ARN: &str =
        "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kubebyon/amqp-GhIjKl";
    let db = TestDb::new().await;
    let broker = TestBroker::new();
    let (port, asked) = secrets_extension(vec![
        (DB_ARN, db.url.clone()),
        (MQ_ARN, tests::broker::amqp_url()),
    ])
    .await;
    let port = port.to_string();
    let api = RuntimeApi::start().await;
    let mut function = Command::new(workspace_binary("api-clusters"));
    function
        .envs(api.env("api-clusters"))
        .env_remove("DATABASE_URL")
        .env_remove("AMQP_URL")
        .env("DATABASE_URL_SECRET_ARN", DB_ARN)
        .env("AMQP_URL_SECRET_ARN", MQ_ARN)
        .env("AMQP_EXCHANGE", &broker.topology.exchange)
        .env("PARAMETERS_SECRETS_EXTENSION_HTTP_PORT", &port)
        .kill_on_drop(true);
    let _function = function
        .env("AWS_SESSION_TOKEN", "session-token")
        .spawn()
        .unwrap();
    let key = tests::development_api_key(&db.pool, "lambda").await;
    let mut event = fixture("apigw-http-v2-create-cluster.json");
    event["headers"]["authorization"] = format!("Bearer {key}").into();
    let answer = response(api.invoke(event).await);
    assert_eq!(
        answer["statusCode"], 202,
        "the database and the broker were reached: {answer}"
    );
    assert_eq!(broker.ready_messages(&ClusterCreation::KIND).await, 1);
    assert_eq!(
        *asked.lock().unwrap(),
        [DB_ARN, MQ_ARN],
        "each fetched once, at start"
    );

    // A token the extension refuses, or a variable given both ways, stops
    // the start naming the variable.
    for (token, also_set) in [("someone-else", false), ("session-token", true)] {
        let mut command = Command::new(workspace_binary("api-clusters"));
        command
            .envs(api.env("api-clusters"))
            .env_remove("AMQP_URL")
            .env("DATABASE_URL_SECRET_ARN", DB_ARN)
            .env("PARAMETERS_SECRETS_EXTENSION_HTTP_PORT", &port)
            .env("AWS_SESSION_TOKEN", token)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if also_set {
            command.env("DATABASE_URL", &db.url);
        } else {
            command.env_remove("DATABASE_URL");
        }
        let output = tokio::time::timeout(std::time::Duration::from_secs(20), command.output())
            .await
            .expect("the start fails at once")
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success());
        assert!(stderr.contains("DATABASE_URL_SECRET_ARN"), "{stderr}");
        if also_set {
            assert!(stderr.contains("DATABASE_URL is set too"), "{stderr}");
        } else {
            assert!(stderr.contains("401"), "{stderr}");
        }
    }
}

/// Where CloudFormation's presigned `ResponseURL` points: records each
/// answer a custom resource PUTs there.
pub(crate) async fn response_url() -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<(Option<String>, serde_json::Value)>,
) {
    use axum::{http::HeaderMap, routing::put};
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/cloudformation-response",
        put(move |headers: HeaderMap, body: String| {
            let tx = tx.clone();
            async move {
                let content_type = headers
                    .get("content-type")
                    .map(|v| v.to_str().unwrap().to_string());
                let _ = tx.send((content_type, serde_json::from_str(&body).unwrap()));
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/cloudformation-response",
        listener.local_addr().unwrap()
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, rx)
}

pub(crate) fn custom_resource(request_type: &str, response_url: &str) -> serde_json::Value {
    serde_json::json!({
        "RequestType": request_type,
        "ServiceToken": "arn:aws:lambda:eu-west-1:123456789012:function:migrate",
        "ResponseURL": response_url,
        "StackId": "arn:aws:cloudformation:eu-west-1:123456789012:stack/kubebyon/0f4e",
        "RequestId": uuid::Uuid::new_v4().to_string(),
        "LogicalResourceId": "Migration",
        "ResourceType": "Custom::Migration",
        "ResourceProperties": { "ServiceToken": "arn:aws:lambda:eu-west-1:123456789012:function:migrate", "Version": "7" }
    })
}

async fn queue_exists(queue: &str) -> bool {
    let connection = lapin::Connection::connect(
        &tests::broker::amqp_url(),
        lapin::ConnectionProperties::default(),
    )
    .await
    .unwrap();
    let channel = connection.create_channel().await.unwrap();
    let declared = channel
        .queue_declare(
            queue.into(),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            lapin::types::FieldTable::default(),
        )
        .await
        .is_ok();
    let _ = connection.close(200, "done".into()).await;
    declared
}

#[tokio::test]
async fn migrate_as_a_cloudformation_custom_resource_prepares_the_database_and_the_queues() {
    let db = TestDb::empty().await;
    let broker = TestBroker::new();
    let api = RuntimeApi::start().await;
    let (url, mut answers) = response_url().await;
    let amqp_url = tests::broker::amqp_url();
    let _function = spawn_function(
        "migrate",
        &api,
        &[
            ("DATABASE_URL", &db.url),
            ("AMQP_URL", &amqp_url),
            ("AMQP_EXCHANGE", &broker.topology.exchange),
        ],
    );
    let queue = broker.topology.queue(ClusterCreation::KIND.job_type);
    assert!(!queue_exists(&queue).await);

    let event = custom_resource("Create", &url);
    let result = response(api.invoke(event.clone()).await);
    assert_eq!(
        result,
        serde_json::json!({ "status": "SUCCESS", "delivered": true })
    );
    let (content_type, answer) = answers.recv().await.unwrap();
    assert_eq!(
        content_type, None,
        "the presigned URL signs no content type"
    );
    assert_eq!(answer["Status"], "SUCCESS", "{answer}");
    assert_eq!(answer["PhysicalResourceId"], "kubebyon-migration");
    for field in ["RequestId", "StackId", "LogicalResourceId"] {
        assert_eq!(answer[field], event[field]);
    }
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(applied as usize, shared::db::MIGRATOR.iter().count());
    assert!(
        queue_exists(&queue).await,
        "the job queues exist before any consumer"
    );

    // An update runs again (idempotent); a delete leaves the data alone.
    let result = response(api.invoke(custom_resource("Update", &url)).await);
    assert_eq!(result["status"], "SUCCESS");
    assert_eq!(answers.recv().await.unwrap().1["Status"], "SUCCESS");
    let result = response(api.invoke(custom_resource("Delete", &url)).await);
    assert_eq!(result["status"], "SUCCESS");
    assert_eq!(answers.recv().await.unwrap().1["Status"], "SUCCESS");
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'clusters'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(tables, 1);
}

#[tokio::test]
async fn a_migration_that_cannot_run_answers_failed_with_its_reason() {
    let api = RuntimeApi::start().await;
    let (url, mut answers) = response_url().await;
    let missing = tests::database::server_url()
        .rsplit_once('/')
        .unwrap()
        .0
        .to_string()
        + "/kubebyon_no_such_database";
    let _function = spawn_function("migrate", &api, &[("DATABASE_URL", &missing)]);
    let result = response(api.invoke(custom_resource("Create", &url)).await);
    assert_eq!(result["status"], "FAILED");
    let (_, answer) = answers.recv().await.unwrap();
    assert_eq!(answer["Status"], "FAILED");
    let reason = answer["Reason"].as_str().unwrap();
    assert!(reason.contains("applying migrations"), "{reason}");
    assert!(reason.contains("kubebyon_no_such_database"), "{reason}");
}

/// A deployment whose secret cannot be read (an ARN that does not exist, a
/// policy that does not allow it): the Create is answered FAILED naming the
/// variable, and the Delete of the rollback that follows is answered
/// SUCCESS, so CloudFormation neither waits for an answer nor ends in
/// ROLLBACK_FAILED.
#[tokio::test]
async fn a_migration_whose_secrets_cannot_be_read_answers_every_request() {
    const MISSING: &str =
        "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kubebyon/no-such-AbCdEf";
    let (port, asked) = secrets_extension(Vec::new()).await;
    let port = port.to_string();
    let api = RuntimeApi::start().await;
    let (url, mut answers) = response_url().await;
    let mut function = Command::new(workspace_binary("migrate"));
    function
        .envs(api.env("migrate"))
        .env_remove("DATABASE_URL")
        .env_remove("AMQP_URL")
        .env("DATABASE_URL_SECRET_ARN", MISSING)
        .env("PARAMETERS_SECRETS_EXTENSION_HTTP_PORT", &port)
        .env("AWS_SESSION_TOKEN", "session-token")
        .kill_on_drop(true);
    let _function = function.spawn().unwrap();
    for (request_type, status) in [
        ("Create", "FAILED"),
        ("Update", "FAILED"),
        ("Delete", "SUCCESS"),
    ] {
        let result = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            api.invoke(custom_resource(request_type, &url)),
        )
        .await
        .unwrap_or_else(|_| panic!("{request_type} is answered"));
        assert_eq!(response(result)["status"], status, "{request_type}");
        let (_, answer) = answers.recv().await.unwrap();
        assert_eq!(answer["Status"], status, "{request_type}: {answer}");
        if status == "FAILED" {
            let reason = answer["Reason"].as_str().unwrap();
            assert!(reason.contains("DATABASE_URL_SECRET_ARN"), "{reason}");
        }
    }
    assert_eq!(
        *asked.lock().unwrap(),
        [MISSING],
        "asked once, at the first Create"
    );
}

/// Under Lambda, where nothing scrapes `/metrics`, the figures are written
/// as CloudWatch Embedded Metric Format lines: a sweep's run reports the job
/// backlog (by type and in total) and itself.
#[tokio::test]
async fn under_lambda_a_sweep_writes_the_backlog_as_embedded_metric_format_lines() {
    let db = TestDb::new().await;
    let broker = TestBroker::new();
    let cluster = seed_cluster(&db.pool).await;
    let pending = enqueue(&db.pool, cluster, ClusterCreation::of, 3).await;
    sqlx::query("UPDATE cluster_jobs SET run_after = now() - interval '45 seconds' WHERE id = $1")
        .bind(pending.job_id)
        .execute(&db.pool)
        .await
        .unwrap();
    let api = RuntimeApi::start().await;
    let amqp_url = tests::broker::amqp_url();
    let mut command = Command::new(workspace_binary("sweep"));
    command
        .envs(api.env("sweep"))
        .env("DATABASE_URL", &db.url)
        .env("AMQP_URL", &amqp_url)
        .env("AMQP_EXCHANGE", &broker.topology.exchange)
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let mut sweep = command.spawn().unwrap();
    let result = response(
        api.invoke(serde_json::json!({ "source": "aws.scheduler", "detail-type": "Scheduled Event", "detail": {} }))
            .await,
    );
    assert!(result["published"].is_number(), "{result}");
    sweep.start_kill().unwrap();
    let output = sweep.wait_with_output().await.unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l.get("_aws").is_some())
        .collect();
    let find = |key: &str, value: &str| {
        lines
            .iter()
            .find(|l| l[key] == value && l.get("JobsPending").is_some())
            .unwrap_or_else(|| panic!("no backlog line for {key}={value} in {lines:?}"))
    };
    let by_type = find("job_type", "cluster_create");
    assert_eq!(by_type["JobsPending"], 1.0);
    let age = by_type["JobsOldestPendingAge"].as_f64().unwrap();
    assert!((45.0..90.0).contains(&age), "{age}");
    assert_eq!(
        by_type["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        "KubeBYON"
    );
    assert_eq!(find("service", "kubebyon")["JobsPending"], 1.0);
    let run = lines
        .iter()
        .find(|l| l["schedule"] == "sweep")
        .expect("the run's own line");
    assert_eq!(
        (run["result"].as_str(), run["ScheduleRuns"].as_f64()),
        (Some("succeeded"), Some(1.0))
    );
}

/// A recorded API Gateway event turned into `GET path` with `accept-encoding`.
fn get_event(path: &str, accept_encoding: &str) -> serde_json::Value {
    let mut event = fixture("apigw-http-v2-create-cluster.json");
    event["rawPath"] = path.into();
    event["requestContext"]["http"]["path"] = path.into();
    event["requestContext"]["http"]["method"] = "GET".into();
    let headers = event["headers"].as_object_mut().unwrap();
    headers.remove("content-length");
    headers.remove("content-type");
    headers.insert("accept".into(), "text/html,*/*".into());
    headers.insert("accept-encoding".into(), accept_encoding.into());
    event["body"] = serde_json::Value::Null;
    event
}

#[tokio::test]
async fn under_lambda_the_console_sends_its_compressed_assets_base64_encoded() {
    let dist = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../functions/console/dist");
    let index = std::fs::read_to_string(dist.join("index.html"))
        .expect("the console is built (scripts/console.sh build, which scripts/test.sh runs)");
    let entry = index
        .split("src=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("index.html loads its entry script")
        .to_string();
    let db = TestDb::new().await;
    let broker = TestBroker::new();
    let api = RuntimeApi::start().await;
    let amqp_url = tests::broker::amqp_url();
    let _function = spawn_function(
        "console",
        &api,
        &[
            ("DATABASE_URL", &db.url),
            ("AMQP_URL", &amqp_url),
            ("AMQP_EXCHANGE", &broker.topology.exchange),
        ],
    );
    let decode = |answer: &serde_json::Value| {
        assert_eq!(answer["isBase64Encoded"], true, "{answer}");
        base64::engine::general_purpose::STANDARD
            .decode(answer["body"].as_str().unwrap())
            .unwrap()
    };

    // A client route: index.html, brotli, revalidated, under the policy.
    let answer = response(api.invoke(get_event("/clusters/abc", "gzip, br")).await);
    assert_eq!(answer["statusCode"], 200, "{answer}");
    assert_eq!(answer["headers"]["content-encoding"], "br");
    assert_eq!(answer["headers"]["cache-control"], "no-cache");
    assert_eq!(
        answer["headers"]["content-security-policy"],
        console::CONTENT_SECURITY_POLICY
    );
    assert_eq!(
        decode(&answer),
        std::fs::read(dist.join("index.html.br")).unwrap()
    );

    // The entry script, gzip only: the bytes of its .gz twin, cached for a year.
    let answer = response(api.invoke(get_event(&entry, "gzip")).await);
    assert_eq!(answer["statusCode"], 200, "{answer}");
    assert_eq!(answer["headers"]["content-encoding"], "gzip");
    assert_eq!(
        answer["headers"]["cache-control"],
        "public, max-age=31536000, immutable"
    );
    assert_eq!(
        decode(&answer),
        std::fs::read(dist.join(format!("{}.gz", entry.trim_start_matches('/')))).unwrap()
    );
}
