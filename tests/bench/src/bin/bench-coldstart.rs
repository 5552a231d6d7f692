//! Cold start of one function binary: spawn → first successful answer, the
//! resident memory at that moment, and the stripped size.
//!
//! Usage: `bench-coldstart --binary PATH --mode MODE [--runs N]`, where MODE is
//! - `http`: the binary serves on `PORT`; the answer is `GET /healthz` → 200;
//! - `lambda-http`: under the loopback Lambda Runtime API, an API Gateway HTTP
//!   API v2 event for `GET /healthz` → statusCode 200;
//! - `lambda-job`: an Amazon MQ batch waking an unknown job of the function's
//!   own type (`job-cluster-create` → `cluster_create`…): the worker connects
//!   to PostgreSQL, finds nothing to claim, answers;
//! - `lambda-schedule`: an EventBridge scheduled event (the function runs once).
//!
//! The `lambda-*` modes run under this program's own loopback Runtime API,
//! or with `--emulator URL` under another one: that of `cargo lambda watch
//! --only-lambda-apis` (cargo-lambda's emulator) listening on URL, where the
//! function polls `URL/.rt` under the name `_` and the event is sent to the
//! emulator's invoke endpoint.
//!
//! Prints one JSON line: median and min–max of N runs (default 20) and the
//! median VmRSS. Needs DATABASE_URL and AMQP_URL for the functions' settings.

// A benchmark's output is its result line.
#![allow(clippy::print_stdout)]

use std::{
    io::{Read, Write},
    net::TcpStream,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context;
use base64::Engine;
use serde_json::{Value, json};
use tests::lambda_runtime_api::{Invocation, RuntimeApi};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let binary = value("--binary").context("--binary PATH")?;
    let mode = value("--mode").context("--mode http|lambda-http|lambda-job|lambda-schedule")?;
    let runs: usize = value("--runs")
        .map(|r| r.parse())
        .transpose()?
        .unwrap_or(20);
    let emulator = value("--emulator");
    let name = Path::new(&binary)
        .file_name()
        .context("binary name")?
        .to_string_lossy()
        .into_owned();

    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        samples.push(match mode.as_str() {
            "http" => http_once(&binary)?,
            "lambda-http" | "lambda-job" | "lambda-schedule" => match &emulator {
                None => lambda_once(&binary, &name, event(&mode, &name)?).await?,
                Some(url) => emulated_once(&binary, url, &event(&mode, &name)?)?,
            },
            other => anyhow::bail!("unknown mode {other}"),
        });
    }
    let mut millis: Vec<f64> = samples.iter().map(|s| s.0).collect();
    let mut rss: Vec<u64> = samples.iter().map(|s| s.1).collect();
    millis.sort_by(f64::total_cmp);
    rss.sort_unstable();
    println!(
        "{}",
        json!({
            "bench": "cold-start",
            "function": name,
            "mode": mode,
            "runtime_api": if emulator.is_some() { "cargo lambda watch" } else { "loopback" },
            "runs": runs,
            "first_answer_ms_median": millis[runs / 2],
            "first_answer_ms_min": millis[0],
            "first_answer_ms_max": millis[runs - 1],
            "rss_kib_median": rss[runs / 2],
            "stripped_bytes": stripped_size(&binary)?,
        })
    );
    Ok(())
}

fn spawn(binary: &str, env: &[(String, String)]) -> anyhow::Result<Child> {
    Command::new(binary)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("spawning {binary}"))
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Milliseconds from spawn to `GET /healthz` answered 200, and VmRSS then.
fn http_once(binary: &str) -> anyhow::Result<(f64, u64)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let started = Instant::now();
    let child = spawn(binary, &[("PORT".into(), port.to_string())])?;
    loop {
        if started.elapsed() > Duration::from_secs(10) {
            stop(child);
            anyhow::bail!("{binary} did not answer within 10 s");
        }
        if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
            stream.write_all(
                b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n",
            )?;
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") {
                let elapsed = started.elapsed().as_secs_f64() * 1000.0;
                let rss = rss_kib(child.id());
                stop(child);
                return Ok((elapsed, rss));
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The invocation event of `mode` for the function `name`.
fn event(mode: &str, name: &str) -> anyhow::Result<Value> {
    Ok(match mode {
        "lambda-http" => json!({
            "version": "2.0", "routeKey": "$default", "rawPath": "/healthz", "rawQueryString": "",
            "headers": {"host": "abcdef1234.execute-api.eu-west-1.amazonaws.com"},
            "requestContext": {
                "accountId": "123456789012", "apiId": "abcdef1234",
                "domainName": "abcdef1234.execute-api.eu-west-1.amazonaws.com",
                "domainPrefix": "abcdef1234",
                "http": {"method": "GET", "path": "/healthz", "protocol": "HTTP/1.1",
                         "sourceIp": "203.0.113.10", "userAgent": "bench"},
                "requestId": "bench", "routeKey": "$default", "stage": "$default",
                "time": "29/Nov/2026:08:30:00 +0000", "timeEpoch": 1795768200000u64
            },
            "isBase64Encoded": false
        }),
        "lambda-job" => {
            let job_id = uuid::Uuid::new_v4();
            let job_type = name
                .strip_prefix("job-")
                .context("a job function's name starts with job-")?
                .replace('-', "_");
            let body = json!({"job_id": job_id, "job_type": job_type}).to_string();
            json!({
                "eventSource": "aws:rmq",
                "eventSourceArn": "arn:aws:mq:eu-west-1:123456789012:broker:kubebyon-jobs:b-1",
                "rmqMessagesByQueue": {(format!("kubebyon.jobs.{job_type}::/")): [{
                    "basicProperties": {"contentType": "application/json", "headers": {},
                        "deliveryMode": 2, "priority": 0, "messageId": job_id.to_string(),
                        "bodySize": body.len()},
                    "redelivered": false,
                    "data": base64::engine::general_purpose::STANDARD.encode(body)
                }]}
            })
        }
        _ => json!({
            "version": "0", "id": "bench", "detail-type": "Scheduled Event", "source": "aws.events",
            "account": "123456789012", "time": "2026-11-29T08:30:00Z", "region": "eu-west-1",
            "resources": [], "detail": {}
        }),
    })
}

/// Milliseconds from spawn to the answer to one invocation, and VmRSS then.
async fn lambda_once(binary: &str, name: &str, event: Value) -> anyhow::Result<(f64, u64)> {
    let api = RuntimeApi::start().await;
    let started = Instant::now();
    let child = spawn(binary, &api.env(name))?;
    let answer = api.invoke(event).await;
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    let rss = rss_kib(child.id());
    stop(child);
    match answer {
        Invocation::Response(body) if body.get("statusCode").is_none_or(|s| s == 200) => {
            Ok((elapsed, rss))
        }
        Invocation::Response(body) => anyhow::bail!("{name} answered {body}"),
        Invocation::Error(error) => anyhow::bail!("{name} failed: {error}"),
    }
}

/// [`lambda_once`] under cargo-lambda's emulator at `url`: the event goes to
/// its invoke endpoint, which answers with the function's response.
fn emulated_once(binary: &str, url: &str, event: &Value) -> anyhow::Result<(f64, u64)> {
    let authority = url
        .strip_prefix("http://")
        .context("--emulator http://HOST:PORT")?;
    let env = [
        ("AWS_LAMBDA_RUNTIME_API", format!("{url}/.rt")),
        ("AWS_LAMBDA_FUNCTION_NAME", "_".into()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128".into()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "1".into()),
    ]
    .map(|(k, v)| (k.to_string(), v));
    let body = event.to_string();
    let started = Instant::now();
    let child = spawn(binary, &env)?;
    let answer = (|| -> anyhow::Result<String> {
        let mut stream = TcpStream::connect(authority)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(
            stream,
            "POST /2015-03-31/functions/_/invocations HTTP/1.1\r\nhost: {authority}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer)
    })();
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    let rss = rss_kib(child.id());
    stop(child);
    let answer = answer.with_context(|| format!("invoking {binary} through {url}"))?;
    let (head, payload) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let payload: Option<Value> = serde_json::from_str(payload).ok();
    let failed = !head.starts_with("HTTP/1.1 200")
        || head.to_ascii_lowercase().contains("x-amz-function-error")
        || payload.as_ref().is_some_and(|p| {
            p.get("errorType").is_some() || p.get("statusCode").is_some_and(|s| s != 200)
        });
    anyhow::ensure!(!failed, "{binary} answered {answer}");
    Ok((elapsed, rss))
}

fn stripped_size(binary: &str) -> anyhow::Result<u64> {
    let out = std::env::temp_dir().join(format!("bench-stripped-{}", std::process::id()));
    let status = Command::new("strip")
        .arg("-o")
        .arg(&out)
        .arg(binary)
        .status()
        .context("strip (binutils)")?;
    anyhow::ensure!(status.success(), "strip failed on {binary}");
    let size = std::fs::metadata(&out)?.len();
    std::fs::remove_file(out)?;
    Ok(size)
}
