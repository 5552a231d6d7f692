//! A Route53-compatible server for tests: moto's server (PyPI `moto[server]`),
//! installed by `scripts/test.sh` into `target/test-venv`; and boto3 from the
//! same venv as an independent client to check what the zone holds.

use std::{process::Child, time::Duration};

pub struct Moto {
    pub url: String,
    child: Child,
}

pub fn python() -> String {
    std::env::var("KUBEBYON_TEST_PYTHON").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/test-venv/bin/python"
        )
        .into()
    })
}

impl Moto {
    pub async fn start() -> Self {
        let port = crate::free_port();
        let mut child = std::process::Command::new(python())
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("moto's server starts (scripts/test.sh installs it)");
        for _ in 0..400 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Self {
                    url: format!("http://127.0.0.1:{port}"),
                    child,
                };
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("moto did not listen on {port}");
    }

    /// Runs a boto3 snippet against this server with `r53` bound to a Route53
    /// client; returns what it prints.
    pub fn boto3(&self, code: &str) -> String {
        let script = format!(
            "import boto3, json\nr53 = boto3.client('route53', endpoint_url='{}', region_name='us-east-1', aws_access_key_id='test', aws_secret_access_key='test')\n{code}",
            self.url
        );
        let out = std::process::Command::new(python())
            .args(["-c", &script])
            .output()
            .expect("python runs");
        assert!(
            out.status.success(),
            "boto3: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Creates a hosted zone; returns its id (without `/hostedzone/`).
    pub fn create_zone(&self, name: &str) -> String {
        self.boto3(&format!(
            "print(r53.create_hosted_zone(Name='{name}', CallerReference='{}')['HostedZone']['Id'].split('/')[-1])",
            uuid::Uuid::new_v4()
        ))
    }

    /// The zone's CNAME records, as `name -> value` (without trailing dots).
    pub fn cnames(&self, zone: &str) -> std::collections::BTreeMap<String, String> {
        let json = self.boto3(&format!(
            "sets = r53.get_paginator('list_resource_record_sets').paginate(HostedZoneId='{zone}')\n\
             print(json.dumps({{s['Name'].rstrip('.'): s['ResourceRecords'][0]['Value'].rstrip('.') for page in sets for s in page['ResourceRecordSets'] if s['Type'] == 'CNAME'}}))"
        ));
        serde_json::from_str(&json).expect("a JSON object")
    }

    pub fn put_cname(&self, zone: &str, name: &str, value: &str) {
        self.boto3(&format!(
            "r53.change_resource_record_sets(HostedZoneId='{zone}', ChangeBatch={{'Changes': [{{'Action': 'UPSERT', 'ResourceRecordSet': {{'Name': '{name}', 'Type': 'CNAME', 'TTL': 60, 'ResourceRecords': [{{'Value': '{value}'}}]}}}}]}})"
        ));
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
