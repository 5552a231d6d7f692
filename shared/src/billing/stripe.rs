//! The parts of Stripe's API the platform uses: creating a Customer for an
//! organisation and a Checkout Session for an order (form-encoded, with an
//! `Idempotency-Key`), expiring a session, and verifying the
//! `Stripe-Signature` of the events it sends.

use std::time::Duration;

use ring::hmac;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

/// Stripe's API, unless the settings name another base (tests do).
pub const DEFAULT_API_BASE: &str = "https://api.stripe.com";

/// Stripe's API as the platform's settings configure it: the client (public
/// destinations only, no redirects), the base URL and the secret key.
pub struct Api {
    pub client: reqwest::Client,
    pub base: String,
    pub key: SecretString,
}

impl Api {
    /// From the stored settings; 503 `billing_not_configured` without a key.
    pub fn from_settings(
        settings: &crate::config::Settings,
        stored: &super::settings::Stored,
    ) -> Result<Self, crate::error::ApiError> {
        let key = crate::settings::open(
            settings.secret_box().as_ref(),
            super::settings::column::STRIPE_SECRET_KEY,
            stored.stripe_secret_key.as_deref(),
        )
        .map_err(|err| anyhow::anyhow!("the Stripe secret key cannot be opened: {err}"))?
        .ok_or_else(|| crate::error::ApiError::NotConfigured {
            code: "billing_not_configured",
            detail: "payments are not set up on this platform (no Stripe secret key)".into(),
        })?;
        let client = crate::outbound::PublicOnly::reqwest(settings.allow_private_outbound)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(anyhow::Error::from)?;
        let base = stored
            .fields
            .stripe_api_base_url
            .clone()
            .unwrap_or_else(|| DEFAULT_API_BASE.into());
        Ok(Self { client, base, key })
    }
}

/// Expires a pending order's Checkout Session before the order is
/// cancelled, so it can no longer be paid: 409 `order_paid_in_stripe` when
/// Stripe has the payment already (its event settles the order), 502 when
/// Stripe cannot be reached or refuses (the order stays pending).
pub async fn expire_before_cancel(
    pool: &sqlx::PgPool,
    settings: &crate::config::Settings,
    order: &super::orders::Order,
) -> Result<(), crate::error::ApiError> {
    use crate::error::ApiError;
    let Some(session) = order.stripe_checkout_session_id.as_deref() else {
        return Ok(());
    };
    let stored = super::settings::load(pool).await?;
    let api = Api::from_settings(settings, &stored)?;
    match expire_checkout_session(&api.client, &api.base, &api.key, session).await {
        Ok(Expiry::Expired) => Ok(()),
        Ok(Expiry::Complete) => Err(ApiError::Conflict {
            code: "order_paid_in_stripe",
            detail:
                "Stripe has the payment for this order; it becomes paid when Stripe's event arrives"
                    .into(),
        }),
        Err(err) => Err(pending_order_error(err, order.id)),
    }
}

/// What a user is told when Stripe did not do what an order needed: 502
/// `stripe_unavailable` (send the same request again) or `stripe_refused`;
/// either way the order stays pending.
pub fn pending_order_error(err: StripeError, order_id: uuid::Uuid) -> crate::error::ApiError {
    use crate::error::ApiError;
    match err {
        StripeError::Unavailable(_) => ApiError::Upstream {
            code: "stripe_unavailable",
            detail: format!(
                "Stripe could not be reached; order {order_id} stays pending, send the same request again"
            ),
        },
        StripeError::Refused { .. } => ApiError::Upstream {
            code: "stripe_refused",
            detail: format!("{err}; order {order_id} stays pending"),
        },
    }
}

/// How old a signed event may be; Stripe's libraries use the same default.
pub const SIGNATURE_TOLERANCE_SECS: i64 = 300;

/// What a Checkout Session charges.
#[derive(Debug, Clone)]
pub enum LineItem<'a> {
    /// A Price of the operator's Stripe account.
    Price(&'a str),
    /// An amount in minor units, named after the plan.
    Amount {
        currency: &'a str,
        unit_amount: i64,
        product_name: &'a str,
    },
}

/// The Stripe Customer an organisation pays as.
#[derive(Debug, Clone)]
pub struct CustomerRequest<'a> {
    pub organization_id: uuid::Uuid,
    /// The organisation's name.
    pub name: &'a str,
    /// Where Stripe sends receipts: the owner who first pays.
    pub email: &'a str,
}

impl CustomerRequest<'_> {
    /// The form fields, in Stripe's bracket notation.
    pub fn form(&self) -> String {
        url::form_urlencoded::Serializer::new(String::new())
            .append_pair("name", self.name)
            .append_pair("email", self.email)
            .append_pair(
                "metadata[organization_id]",
                &self.organization_id.to_string(),
            )
            .finish()
    }

    /// One key per organisation: two first checkouts at once get one
    /// customer.
    pub fn idempotency_key(&self) -> String {
        format!("kubebyon-organization-{}", self.organization_id)
    }
}

/// The customer Stripe made.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Customer {
    pub id: String,
}

/// Creates the customer: `POST {base}/v1/customers`.
pub async fn create_customer(
    client: &reqwest::Client,
    api_base: &str,
    secret_key: &SecretString,
    request: &CustomerRequest<'_>,
) -> Result<Customer, StripeError> {
    let customer: Customer = post_form(
        client,
        api_base,
        secret_key,
        "/v1/customers",
        &request.idempotency_key(),
        request.form(),
    )
    .await?;
    // Only a customer id is stored (the column's check says the same).
    if !customer.id.starts_with("cus_")
        || customer.id.len() > 204
        || !customer.id[4..].bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return Err(StripeError::Refused {
            status: 200,
            message: "the answer's id is not a customer's".into(),
        });
    }
    Ok(customer)
}

/// The organisation's Stripe Customer: the one stored, else one made now
/// (with its email the paying owner's) and stored. Two first checkouts at
/// once make one customer (the idempotency key is the organisation's) and
/// store it once. When Stripe cannot make it, `order_id` stays pending (the
/// answer says so, as for its session).
pub async fn customer_for(
    pool: &sqlx::PgPool,
    api: &Api,
    organization_id: uuid::Uuid,
    payer_email: &str,
    order_id: uuid::Uuid,
) -> Result<String, crate::error::ApiError> {
    let stored = sqlx::query!(
        "SELECT name, stripe_customer_id FROM organizations WHERE id = $1",
        organization_id
    )
    .fetch_optional(pool)
    .await?
    .ok_or(crate::error::ApiError::NotFound {
        what: "organization",
    })?;
    if let Some(customer) = stored.stripe_customer_id {
        return Ok(customer);
    }
    let request = CustomerRequest {
        organization_id,
        name: &stored.name,
        email: payer_email,
    };
    let customer = create_customer(&api.client, &api.base, &api.key, &request)
        .await
        .map_err(|err| {
            tracing::warn!(%organization_id, error = %err, "no Stripe customer for the organization");
            pending_order_error(err, order_id)
        })?;
    let kept = sqlx::query_scalar!(
        r#"UPDATE organizations SET stripe_customer_id = coalesce(stripe_customer_id, $2)
           WHERE id = $1 RETURNING stripe_customer_id AS "id!""#,
        organization_id,
        customer.id
    )
    .fetch_one(pool)
    .await?;
    Ok(kept)
}

/// A Checkout Session to create, in payment mode, for one order.
#[derive(Debug, Clone)]
pub struct CheckoutRequest<'a> {
    /// The order's id: Stripe returns it as `client_reference_id` in the
    /// session's events.
    pub order_id: uuid::Uuid,
    pub line_item: LineItem<'a>,
    /// The organisation's Stripe Customer (`cus_…`).
    pub customer: &'a str,
    pub success_url: &'a str,
    pub cancel_url: &'a str,
}

impl CheckoutRequest<'_> {
    /// The form fields, in Stripe's bracket notation.
    pub fn form(&self) -> String {
        let order_id = self.order_id.to_string();
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        form.append_pair("mode", "payment")
            .append_pair("client_reference_id", &order_id)
            .append_pair("metadata[order_id]", &order_id)
            .append_pair("customer", self.customer)
            .append_pair("success_url", self.success_url)
            .append_pair("cancel_url", self.cancel_url)
            .append_pair("line_items[0][quantity]", "1");
        match &self.line_item {
            LineItem::Price(price) => {
                form.append_pair("line_items[0][price]", price);
            }
            LineItem::Amount {
                currency,
                unit_amount,
                product_name,
            } => {
                form.append_pair("line_items[0][price_data][currency]", currency)
                    .append_pair(
                        "line_items[0][price_data][unit_amount]",
                        &unit_amount.to_string(),
                    )
                    .append_pair(
                        "line_items[0][price_data][product_data][name]",
                        product_name,
                    );
            }
        }
        form.finish()
    }

    /// One key per order: a retried request gets the session the first one
    /// made instead of a second one.
    pub fn idempotency_key(&self) -> String {
        format!("kubebyon-order-{}", self.order_id)
    }
}

/// The session Stripe made.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct CheckoutSession {
    pub id: String,
    pub url: String,
}

#[derive(Debug, thiserror::Error)]
pub enum StripeError {
    /// Stripe could not be reached, timed out, or answered 429 or 5xx: the
    /// same request (same idempotency key) may be sent again.
    #[error("Stripe is unavailable: {0}")]
    Unavailable(String),
    /// Stripe refused the request.
    #[error("Stripe refused the request ({status}): {message}")]
    Refused { status: u16, message: String },
}

#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Deserialize)]
struct ErrorDetail {
    message: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

/// Creates the session: `POST {base}/v1/checkout/sessions`.
pub async fn create_checkout_session(
    client: &reqwest::Client,
    api_base: &str,
    secret_key: &SecretString,
    request: &CheckoutRequest<'_>,
) -> Result<CheckoutSession, StripeError> {
    post_form(
        client,
        api_base,
        secret_key,
        "/v1/checkout/sessions",
        &request.idempotency_key(),
        request.form(),
    )
    .await
}

/// One form-encoded `POST` with an idempotency key, its answer read as `T`.
async fn post_form<T: serde::de::DeserializeOwned>(
    client: &reqwest::Client,
    api_base: &str,
    secret_key: &SecretString,
    path: &str,
    idempotency_key: &str,
    form: String,
) -> Result<T, StripeError> {
    let url = format!("{}{path}", api_base.trim_end_matches('/'));
    let response = client
        .post(url)
        .bearer_auth(secret_key.expose_secret())
        .header("Idempotency-Key", idempotency_key)
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .timeout(Duration::from_secs(20))
        .body(form)
        .send()
        .await
        .map_err(|err| StripeError::Unavailable(without_url(err)))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|err| StripeError::Unavailable(without_url(err)))?;
    if status.is_success() {
        return serde_json::from_slice(&body).map_err(|err| StripeError::Refused {
            status: status.as_u16(),
            message: format!("the answer is not the object asked for ({path}): {err}"),
        });
    }
    let message = serde_json::from_slice::<ErrorBody>(&body)
        .ok()
        .map(|b| {
            format!(
                "{}: {}",
                b.error.kind.unwrap_or_else(|| "error".into()),
                b.error.message.unwrap_or_default()
            )
        })
        .unwrap_or_else(|| format!("HTTP {status}"));
    if status.as_u16() == 429 || status.is_server_error() {
        Err(StripeError::Unavailable(message))
    } else {
        Err(StripeError::Refused {
            status: status.as_u16(),
            message,
        })
    }
}

/// What expiring a session found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// The session is expired now (or was): it can no longer be paid.
    Expired,
    /// Stripe refused: the session is complete, paid already.
    Complete,
}

/// Expires an open session so that it can no longer be paid:
/// `POST {base}/v1/checkout/sessions/{id}/expire`.
pub async fn expire_checkout_session(
    client: &reqwest::Client,
    api_base: &str,
    secret_key: &SecretString,
    session_id: &str,
) -> Result<Expiry, StripeError> {
    let url = format!(
        "{}/v1/checkout/sessions/{}/expire",
        api_base.trim_end_matches('/'),
        url::form_urlencoded::byte_serialize(session_id.as_bytes()).collect::<String>()
    );
    let response = client
        .post(url)
        .bearer_auth(secret_key.expose_secret())
        .header("Idempotency-Key", format!("kubebyon-expire-{session_id}"))
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .map_err(|err| StripeError::Unavailable(without_url(err)))?;
    let status = response.status();
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    if status.is_success() {
        return Ok(Expiry::Expired);
    }
    if status.as_u16() == 429 || status.is_server_error() {
        return Err(StripeError::Unavailable(format!("HTTP {status}")));
    }
    // Only an open session can be expired: what it is now says why not.
    let message = body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let url = format!(
        "{}/v1/checkout/sessions/{}",
        api_base.trim_end_matches('/'),
        url::form_urlencoded::byte_serialize(session_id.as_bytes()).collect::<String>()
    );
    let session: serde_json::Value = client
        .get(url)
        .bearer_auth(secret_key.expose_secret())
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .map_err(|err| StripeError::Unavailable(without_url(err)))?
        .json()
        .await
        .unwrap_or_default();
    match session["status"].as_str() {
        Some("complete") => Ok(Expiry::Complete),
        Some("expired") => Ok(Expiry::Expired),
        _ => Err(StripeError::Refused {
            status: status.as_u16(),
            message,
        }),
    }
}

/// reqwest's message without the URL (it is ours, and says nothing).
fn without_url(err: reqwest::Error) -> String {
    err.without_url().to_string()
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the Stripe-Signature header is missing or malformed")]
    Malformed,
    #[error("the signature's timestamp is outside the {SIGNATURE_TOLERANCE_SECS} s tolerance")]
    Stale,
    #[error("no v1 signature matches")]
    Mismatch,
}

/// Verifies `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`: one of the v1
/// values must be HMAC-SHA256 of `<t>.<payload>` under the endpoint secret
/// (during a secret roll Stripe signs with both secrets), compared in
/// constant time, and `t` within the tolerance of `now`, either way.
pub fn verify_signature(
    header: &str,
    payload: &[u8],
    secret: &SecretString,
    now_unix: i64,
) -> Result<(), SignatureError> {
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        let (key, value) = part
            .trim()
            .split_once('=')
            .ok_or(SignatureError::Malformed)?;
        match key {
            "t" => {
                timestamp = Some(
                    value
                        .parse::<i64>()
                        .map_err(|_| SignatureError::Malformed)?,
                )
            }
            "v1" => signatures.push(decode_hex(value).ok_or(SignatureError::Malformed)?),
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(SignatureError::Malformed)?;
    if signatures.is_empty() || signatures.len() > 8 {
        return Err(SignatureError::Malformed);
    }
    // Checked arithmetic: `t=-9223372036854775808` must be stale, not a
    // panic (debug) or a wrapped difference whose `abs()` passes (release).
    let fresh = now_unix
        .checked_sub(timestamp)
        .and_then(i64::checked_abs)
        .is_some_and(|skew| skew <= SIGNATURE_TOLERANCE_SECS);
    if !fresh {
        return Err(SignatureError::Stale);
    }
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.expose_secret().as_bytes());
    let mut signed = timestamp.to_string().into_bytes();
    signed.push(b'.');
    signed.extend_from_slice(payload);
    if signatures
        .iter()
        .any(|signature| hmac::verify(&key, &signed, signature).is_ok())
    {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect()
}

/// The fields of an event the platform reads.
#[derive(Debug, Deserialize)]
pub struct Event {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub data: EventData,
}

#[derive(Debug, Deserialize)]
pub struct EventData {
    pub object: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(secret: &str, t: i64, payload: &[u8]) -> String {
        let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
        let mut signed = format!("{t}.").into_bytes();
        signed.extend_from_slice(payload);
        hmac::sign(&key, &signed)
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[test]
    fn a_signature_under_the_secret_and_in_time_passes_and_any_change_fails() {
        let secret = SecretString::from("whsec_test");
        let body = br#"{"id":"evt_1"}"#;
        let v1 = sign("whsec_test", 1_000, body);
        let header = format!("t=1000,v1={v1}");
        assert_eq!(verify_signature(&header, body, &secret, 1_100), Ok(()));
        assert_eq!(
            verify_signature(&header, br#"{"id":"evt_2"}"#, &secret, 1_100),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_signature(&header, body, &secret, 1_301),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify_signature(&format!("t=1001,v1={v1}"), body, &secret, 1_100),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_signature("v1=00", body, &secret, 1_100),
            Err(SignatureError::Malformed)
        );
    }

    /// The review's header: a timestamp at the ends of `i64` is stale, not a
    /// panic, and not a wrapped difference that passes, even when signed.
    #[test]
    fn timestamps_at_the_ends_of_the_range_are_stale() {
        let secret = SecretString::from("whsec_test");
        let body = b"{}";
        for (t, now) in [
            (i64::MIN, 1_700_000_000),
            (i64::MIN, 0),
            (i64::MAX, -1),
            (i64::MAX, 1_700_000_000),
            (-1, i64::MAX),
        ] {
            let header = format!("t={t},v1={}", sign("whsec_test", t, body));
            assert_eq!(
                verify_signature(&header, body, &secret, now),
                Err(SignatureError::Stale),
                "t={t} now={now}"
            );
        }
    }

    #[test]
    fn during_a_secret_roll_either_signature_may_match() {
        let secret = SecretString::from("whsec_new");
        let body = b"{}";
        let header = format!(
            "t=5,v1={},v1={},v0=ignored",
            sign("whsec_old", 5, body),
            sign("whsec_new", 5, body)
        );
        assert_eq!(verify_signature(&header, body, &secret, 5), Ok(()));
    }

    #[test]
    fn the_form_uses_stripe_bracket_notation_and_one_key_per_order() {
        let order_id = uuid::Uuid::nil();
        let request = CheckoutRequest {
            order_id,
            line_item: LineItem::Amount {
                currency: "usd",
                unit_amount: 1900,
                product_name: "Pro & more",
            },
            customer: "cus_Q1",
            success_url: "https://p/s?x=1",
            cancel_url: "https://p/c",
        };
        let form = request.form();
        assert!(form.contains("line_items%5B0%5D%5Bprice_data%5D%5Bunit_amount%5D=1900"));
        assert!(form.contains("product_data%5D%5Bname%5D=Pro+%26+more"));
        assert!(form.contains("customer=cus_Q1"));
        assert!(!form.contains("customer_email"));
        assert_eq!(
            request.idempotency_key(),
            format!("kubebyon-order-{order_id}")
        );
    }

    #[test]
    fn a_customer_is_named_after_its_organization_with_one_key_per_organization() {
        let organization_id = uuid::Uuid::from_u128(7);
        let request = CustomerRequest {
            organization_id,
            name: "Acme & Co",
            email: "a+b@example.com",
        };
        let form = request.form();
        assert!(form.contains("name=Acme+%26+Co"), "{form}");
        assert!(form.contains("email=a%2Bb%40example.com"), "{form}");
        assert!(form.contains(&format!("metadata%5Borganization_id%5D={organization_id}")));
        assert_eq!(
            request.idempotency_key(),
            format!("kubebyon-organization-{organization_id}")
        );
    }
}
