//! A TCP proxy in front of a real server that the test can take down and bring
//! back, to play a broker outage or restart without touching the shared broker,
//! or pause, to play a server stopped by SIGSTOP (connections open, nothing
//! carried) without stopping the shared one.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::AbortHandle,
};

pub struct TcpProxy {
    pub addr: SocketAddr,
    up: Arc<AtomicBool>,
    paused: watch::Sender<bool>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl TcpProxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let up = Arc::new(AtomicBool::new(true));
        let (paused, _) = watch::channel(false);
        let connections = Arc::new(Mutex::new(Vec::new()));
        let accept = tokio::spawn({
            let up = up.clone();
            let paused = paused.clone();
            let connections = connections.clone();
            async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        return;
                    };
                    if !up.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let (to_server, to_client) = (paused.subscribe(), paused.subscribe());
                    let task = tokio::spawn(async move {
                        if let Ok(server) = TcpStream::connect(upstream).await {
                            let (client_reads, client_writes) = client.into_split();
                            let (server_reads, server_writes) = server.into_split();
                            tokio::join!(
                                carry(client_reads, server_writes, to_server),
                                carry(server_reads, client_writes, to_client)
                            );
                        }
                    });
                    connections.lock().expect("lock").push(task.abort_handle());
                }
            }
        })
        .abort_handle();
        Self {
            addr,
            up,
            paused,
            connections,
            accept,
        }
    }

    /// Cuts every open connection and refuses new ones.
    pub fn down(&self) {
        self.up.store(false, Ordering::SeqCst);
        for connection in self.connections.lock().expect("lock").drain(..) {
            connection.abort();
        }
    }

    /// Refuses new connections and leaves the open ones be.
    pub fn refuse_new(&self) {
        self.up.store(false, Ordering::SeqCst);
    }

    /// Carries nothing more, either way, until [`TcpProxy::resume`]: the
    /// connections stay open and new ones are taken, as the kernel takes
    /// them for a stopped server.
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    pub fn up(&self) {
        self.up.store(true, Ordering::SeqCst);
    }

    /// An AMQP URL through this proxy.
    pub fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@{}/%2f", self.addr)
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.down();
    }
}

/// Copies `from` to `to` until either ends, holding each chunk while paused.
async fn carry(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    mut paused: watch::Receiver<bool>,
) {
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let read = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if paused.wait_for(|paused| !paused).await.is_err()
            || to.write_all(&chunk[..read]).await.is_err()
        {
            break;
        }
    }
    let _ = to.shutdown().await;
}
