//! A loopback DNS server speaking the real protocol over UDP (messages read
//! and written with hickory-proto): it answers TXT queries for the names a
//! test publishes, NXDOMAIN for the rest. What a tenant's DNS provider is to
//! the platform's hostname challenge.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use hickory_proto::{
    op::{Message, MessageType, ResponseCode},
    rr::{RData, Record, RecordType, rdata::TXT},
};
use tokio::{net::UdpSocket, task::AbortHandle};

pub struct DnsServer {
    pub addr: SocketAddr,
    records: Arc<Mutex<HashMap<String, Vec<String>>>>,
    task: AbortHandle,
}

impl DnsServer {
    pub async fn start() -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let records: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
        let served = records.clone();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let Ok((len, peer)) = socket.recv_from(&mut buf).await else {
                    return;
                };
                let Ok(query) = Message::from_vec(&buf[..len]) else {
                    continue;
                };
                let mut answer = Message::response(query.metadata.id, query.metadata.op_code);
                answer.metadata.authoritative = true;
                answer.metadata.recursion_desired = query.metadata.recursion_desired;
                answer.metadata.recursion_available = true;
                answer.metadata.message_type = MessageType::Response;
                let mut found = false;
                for question in &query.queries {
                    answer.add_query(question.clone());
                    let name = question
                        .name()
                        .to_ascii()
                        .trim_end_matches('.')
                        .to_lowercase();
                    let values = served.lock().unwrap().get(&name).cloned();
                    if let Some(values) = values {
                        found = true;
                        if question.query_type() == RecordType::TXT {
                            for value in values {
                                answer.add_answer(Record::from_rdata(
                                    question.name().clone(),
                                    60,
                                    RData::TXT(TXT::new(vec![value])),
                                ));
                            }
                        }
                    }
                }
                if !found {
                    answer.metadata.response_code = ResponseCode::NXDomain;
                }
                if let Ok(bytes) = answer.to_vec() {
                    let _ = socket.send_to(&bytes, peer).await;
                }
            }
        })
        .abort_handle();
        Self {
            addr,
            records,
            task,
        }
    }

    /// Publishes a TXT value at `name` (kept with any already there).
    pub fn publish_txt(&self, name: &str, value: &str) {
        self.records
            .lock()
            .unwrap()
            .entry(name.trim_end_matches('.').to_lowercase())
            .or_default()
            .push(value.to_string());
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
