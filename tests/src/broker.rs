use lapin::{Connection, ConnectionProperties, options::QueueDeclareOptions, types::FieldTable};
use queues::Topology;
use secrecy::SecretString;
use shared::domain::{JobKind, JobType};
use uuid::Uuid;

pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// The broker's address, from `AMQP_URL`: what a proxy in front of it dials.
pub fn addr() -> std::net::SocketAddr {
    let url = amqp_url();
    let host_port = url
        .split('@')
        .nth(1)
        .unwrap_or("127.0.0.1:5672")
        .split('/')
        .next()
        .unwrap();
    let host_port = if host_port.contains(':') {
        host_port.to_string()
    } else {
        format!("{host_port}:5672")
    };
    let host_port = host_port.replace("localhost", "127.0.0.1");
    host_port.parse().expect("AMQP_URL host:port")
}

/// An exchange and queues of this test's own, deleted when it ends.
pub struct TestBroker {
    pub url: SecretString,
    pub topology: Topology,
}

impl TestBroker {
    pub fn new() -> Self {
        Self {
            url: SecretString::from(amqp_url()),
            topology: Topology::new(format!("kbtest.{}", Uuid::new_v4().simple())),
        }
    }

    /// Messages ready in a job kind's queue (declares it if absent).
    pub async fn ready_messages(&self, kind: &JobKind) -> u32 {
        self.queue_counts(kind.job_type).await.0
    }

    /// Consumers of a job kind's queue (declares it if absent).
    pub async fn consumers(&self, kind: &JobKind) -> u32 {
        self.queue_counts(kind.job_type).await.1
    }

    async fn queue_counts(&self, job_type: JobType) -> (u32, u32) {
        let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
            .await
            .expect("RabbitMQ is reachable at AMQP_URL");
        let channel = connection.create_channel().await.expect("channel");
        self.topology
            .declare(&channel)
            .await
            .expect("declare topology");
        let queue = channel
            .queue_declare(
                self.topology.queue(job_type).as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("queue exists");
        let _ = connection.close(200, "done".into()).await;
        (queue.message_count(), queue.consumer_count())
    }
}

impl Default for TestBroker {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        let topology = self.topology.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async move {
                let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
                    .await
                    .ok()?;
                let channel = connection.create_channel().await.ok()?;
                for kind in shared::app::capabilities::job_kinds().iter() {
                    let _ = channel
                        .queue_delete(
                            topology.queue(kind.job_type).as_str().into(),
                            Default::default(),
                        )
                        .await;
                }
                let _ = channel
                    .exchange_delete(topology.exchange.as_str().into(), Default::default())
                    .await;
                connection.close(200, "done".into()).await.ok()
            })
        })
        .join();
    }
}
