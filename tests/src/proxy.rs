//! A TCP proxy in front of a real server that the test can take down and bring
//! back, to play a broker outage or restart without touching the shared broker.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use tokio::{
    net::{TcpListener, TcpStream},
    task::AbortHandle,
};

pub struct TcpProxy {
    pub addr: SocketAddr,
    up: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl TcpProxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let up = Arc::new(AtomicBool::new(true));
        let connections = Arc::new(Mutex::new(Vec::new()));
        let accept = tokio::spawn({
            let up = up.clone();
            let connections = connections.clone();
            async move {
                loop {
                    let Ok((mut client, _)) = listener.accept().await else {
                        return;
                    };
                    if !up.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let task = tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
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
