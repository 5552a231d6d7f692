//! `notify`: the schedule that delivers notifications. Each run fans new
//! outbox rows out into deliveries, then claims the deliveries that are due
//! (100 at a time, 32 sent at once) and settles each, until none is due or
//! its time is up. Email goes through the settings' SMTP server, webhooks to
//! the settings' outbound URL, signed as Standard Webhooks.

use std::time::{Duration, Instant};

use futures_util::{StreamExt, stream};
use queues::runtime::{Schedule, ScheduleContext};
use serde::Serialize;
use shared::config::Millis;
use shared::{
    mail::Mailer,
    notifications::{self, Claimed, webhook},
    settings,
};

/// Deliveries sent at once.
pub const CONCURRENCY: usize = 32;
/// Deliveries claimed per round.
pub const BATCH: i64 = 100;
/// How long one run goes on claiming; what it claimed it finishes.
pub const RUN_BUDGET: Duration = Duration::from_secs(40);

pub const SCHEDULE: Schedule = Schedule {
    name: "notify",
    interval: Millis::new("NOTIFY_INTERVAL_MS", 5_000),
    needs_host: false,
    needs_publisher: false,
    run: |ctx| Box::pin(async move { Ok(serde_json::to_value(run(&ctx).await?)?) }),
};

#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub struct NotifyReport {
    pub fanned_out: u64,
    pub delivered: u64,
    /// Attempts that failed (retried later, or failed for good).
    pub failed_attempts: u64,
}

/// The channels as this run can use them: each is built once, and what is
/// wrong with one is the error of each of its deliveries.
struct Channels {
    mailer: Result<Mailer, String>,
    webhook: Result<(String, webhook::Signer, reqwest::Client), String>,
}

impl Channels {
    async fn open(ctx: &ScheduleContext) -> anyhow::Result<Self> {
        let mailer = Mailer::from_settings(&ctx.pool, &ctx.settings)
            .await
            .map_err(|err| err.to_string());
        let stored = notifications::settings::load(&ctx.pool).await?;
        let webhook = match stored.fields.outbound_webhook_url.clone() {
            None => Err("no outbound webhook URL is configured".to_string()),
            Some(url) => settings::open(
                ctx.settings.secret_box().as_ref(),
                notifications::settings::column::WEBHOOK_SECRET,
                stored.webhook_secret.as_deref(),
            )
            .map_err(|err| format!("the outbound webhook secret cannot be opened: {err}"))
            .and_then(|secret| {
                secret
                    .as_ref()
                    .and_then(webhook::Signer::from_secret)
                    .ok_or_else(|| {
                        "the outbound webhook secret is missing or not a whsec_ secret".to_string()
                    })
            })
            .and_then(|signer| {
                // A redirect would carry the signed event elsewhere.
                shared::outbound::PublicOnly::reqwest(ctx.settings.allow_private_outbound)
                    .redirect(reqwest::redirect::Policy::none())
                    .pool_max_idle_per_host(CONCURRENCY)
                    .build()
                    .map(|client| (url, signer, client))
                    .map_err(|err| err.to_string())
            }),
        };
        Ok(Self { mailer, webhook })
    }

    async fn deliver(&self, delivery: &Claimed) -> Result<(), String> {
        match delivery.channel.as_str() {
            "email" => {
                let mailer = self.mailer.as_ref().map_err(Clone::clone)?;
                let (subject, body) = notifications::email_text(delivery);
                let message_id = format!("<{}@kubebyon>", delivery.message_id());
                mailer
                    .send(&delivery.email, &subject, body, Some(message_id))
                    .await
                    .map_err(|err| err.to_string())
            }
            "webhook" => {
                let (url, signer, client) = self.webhook.as_ref().map_err(Clone::clone)?;
                let body = serde_json::to_vec(&delivery.event()).map_err(|err| err.to_string())?;
                webhook::send(client, url, signer, &delivery.message_id(), body).await
            }
            other => Err(format!("unknown channel {other}")),
        }
    }
}

pub async fn run(ctx: &ScheduleContext) -> anyhow::Result<NotifyReport> {
    let started = Instant::now();
    let retries = *ctx.settings.part::<notifications::Retries>()?;
    let mut report = NotifyReport::default();
    let mut channels = None;
    loop {
        report.fanned_out += notifications::fan_out(&ctx.pool, 500).await?;
        let batch = notifications::claim(&ctx.pool, BATCH).await?;
        if batch.is_empty() {
            break;
        }
        if channels.is_none() {
            channels = Some(Channels::open(ctx).await?);
        }
        let channels = channels.as_ref().expect("opened above");
        let results: Vec<(Claimed, Result<(), String>)> = stream::iter(batch)
            .map(|delivery| async move {
                let result = channels.deliver(&delivery).await;
                (delivery, result)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for (delivery, result) in &results {
            match result {
                Ok(()) => report.delivered += 1,
                Err(error) => {
                    report.failed_attempts += 1;
                    tracing::warn!(delivery_id = delivery.id, channel = %delivery.channel, attempt = delivery.attempt, error, "a notification was not delivered");
                }
            }
        }
        notifications::settle(&ctx.pool, &results, retries).await?;
        if started.elapsed() > RUN_BUDGET {
            break;
        }
    }
    Ok(report)
}
