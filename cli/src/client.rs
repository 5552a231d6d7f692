//! The platform's HTTP API as the command line calls it: the context's
//! address and key, the organisation header, problem+json answers turned
//! into one-line errors, and `--verbose` lines that name each request and
//! its answer but never a header or a body (keys and tokens travel there).

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{CliError, Exit};

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Client {
    http: reqwest::Client,
    base: String,
    api_key: Option<String>,
    organization: Option<String>,
    verbose: bool,
}

/// An answer: its status and its JSON body (`null` for none).
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
}

impl Answer {
    /// The body read as `T`.
    pub fn read<T: DeserializeOwned>(&self) -> Result<T, CliError> {
        read(&self.body)
    }
}

/// A JSON value read as `T`, or an error that says the platform answered
/// something this version does not read.
pub fn read<T: DeserializeOwned>(body: &Value) -> Result<T, CliError> {
    serde_json::from_value(body.clone()).map_err(|e| {
        CliError::new(
            Exit::Failure,
            format!("the platform's answer is not what this version of kubebyon reads: {e}"),
        )
    })
}

impl Client {
    pub fn new(
        base: &str,
        api_key: Option<String>,
        organization: Option<String>,
        verbose: bool,
    ) -> Result<Self, CliError> {
        let base = base.trim_end_matches('/').to_string();
        let parsed = reqwest::Url::parse(&base).map_err(|e| {
            CliError::new(
                Exit::Usage,
                format!("{base} is not the platform's address: {e}"),
            )
        })?;
        // The key travels in every request: in the clear only to this machine.
        let loopback = parsed.host_str().is_some_and(|host| {
            host.eq_ignore_ascii_case("localhost")
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        });
        match parsed.scheme() {
            "https" => {}
            "http" if loopback => {}
            "http" => {
                return Err(CliError::new(
                    Exit::Usage,
                    format!(
                        "{base} would carry the API key in the clear: use https:// (plain http only to this machine)"
                    ),
                ));
            }
            _ => {
                return Err(CliError::new(
                    Exit::Usage,
                    format!("{base} is not an https address"),
                ));
            }
        }
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("kubebyon/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CliError::new(Exit::Failure, format!("no HTTP client: {e}")))?;
        Ok(Self {
            http,
            base,
            api_key,
            organization,
            verbose,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Refuses before any request when there is no key.
    pub fn require_key(&self) -> Result<(), CliError> {
        match self.api_key {
            Some(_) => Ok(()),
            None => Err(CliError::new(
                Exit::Auth,
                "not signed in: run `kubebyon login`, or give --api-key (KUBEBYON_API_KEY)",
            )),
        }
    }

    fn note(&self, line: std::fmt::Arguments<'_>) {
        if self.verbose {
            note!("{line}");
        }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Body<'_>>,
    ) -> Result<Answer, CliError> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method.clone(), &url);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        if let Some(organization) = &self.organization {
            request = request.header("KubeBYON-Organization", organization);
        }
        request = match body {
            Some(Body::Json(value)) => request.json(value),
            Some(Body::Form(pairs)) => request.form(pairs),
            None => request,
        };
        self.note(format_args!("> {method} {url}"));
        let started = Instant::now();
        let response = request.send().await.map_err(|e| {
            let why = if e.is_timeout() {
                "it did not answer in time".to_string()
            } else {
                std::error::Error::source(&e)
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| e.to_string())
            };
            CliError::new(
                Exit::Unavailable,
                format!("cannot reach the platform at {}: {why}", self.base),
            )
        })?;
        let status = response.status();
        let text = response.text().await.map_err(|e| {
            CliError::new(
                Exit::Unavailable,
                format!("the platform's answer was cut off: {e}"),
            )
        })?;
        self.note(format_args!(
            "< {} ({} ms, {} bytes)",
            status.as_u16(),
            started.elapsed().as_millis(),
            text.len()
        ));
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Ok(Answer { status, body })
    }

    /// A request whose error answers become [`CliError`]s.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, CliError> {
        let answer = self.send(method, path, body.map(Body::Json)).await?;
        if answer.status.is_success() {
            Ok(answer)
        } else {
            Err(CliError::from_problem(answer.status.as_u16(), &answer.body))
        }
    }

    pub async fn get(&self, path: &str) -> Result<Value, CliError> {
        Ok(self.call(Method::GET, path, None).await?.body)
    }

    /// A form post whose answer is returned whatever its status (the device
    /// grant's OAuth errors are 400s the caller reads).
    pub async fn post_form(&self, path: &str, pairs: &[(&str, &str)]) -> Result<Answer, CliError> {
        self.send(Method::POST, path, Some(Body::Form(pairs))).await
    }
}

enum Body<'a> {
    Json(&'a Value),
    Form(&'a [(&'a str, &'a str)]),
}

/// What a path segment or query value keeps as it is: RFC 3986's unreserved
/// characters.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// A path segment (or a query value), percent-encoded.
pub fn segment(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, UNRESERVED).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_travels_in_the_clear_only_to_this_machine() {
        for base in [
            "https://kubebyon.example.com",
            "http://127.0.0.1:8080",
            "http://localhost:8080/",
            "http://[::1]:8080",
        ] {
            assert!(Client::new(base, None, None, false).is_ok(), "{base}");
        }
        for base in [
            "http://kubebyon.example.com",
            "http://localhost.evil.example",
            "http://10.0.0.5:8080",
            "ftp://kubebyon.example.com",
        ] {
            let refused = Client::new(base, None, None, false).err();
            assert_eq!(refused.map(|e| e.exit), Some(Exit::Usage), "{base}");
        }
    }
}
