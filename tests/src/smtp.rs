//! A real SMTP server for tests: aiosmtpd (PyPI) storing each message it
//! receives in a maildir. `scripts/test.sh` installs it into
//! `target/test-venv` and names its Python in `KUBEBYON_TEST_PYTHON`.

use std::{path::PathBuf, process::Child, time::Duration};

pub struct SmtpSink {
    pub port: u16,
    dir: PathBuf,
    child: Child,
    /// Messages whose code a test has read already.
    read: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl SmtpSink {
    pub async fn start() -> Self {
        let python = crate::moto::python();
        let port = crate::free_port();
        let dir = std::env::temp_dir().join(format!("kubebyon-mail-{}", uuid::Uuid::new_v4()));
        let mut child = std::process::Command::new(&python)
            .args(["-m", "aiosmtpd", "-n", "-l", &format!("127.0.0.1:{port}")])
            .args(["-c", "aiosmtpd.handlers.Mailbox"])
            .arg(&dir)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start aiosmtpd with {python} ({e}); run scripts/test.sh, which installs it"));
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Self {
                    port,
                    dir,
                    child,
                    read: Default::default(),
                };
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("aiosmtpd did not listen on {port}");
    }

    /// `SMTP_URL` for this sink (plain SMTP on loopback).
    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// The maildir the messages land in (`new/` holds them).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Every message received so far, raw, oldest first.
    pub fn messages(&self) -> Vec<String> {
        let mut files: Vec<_> = std::fs::read_dir(self.dir.join("new"))
            .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
        files
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .collect()
    }

    /// The 6-digit code in the newest message to `to`, once that message is
    /// one whose code no call read before: mail leaves the platform after
    /// the request that asked for it answers, so this waits for it a little.
    pub async fn code_for(&self, to: &str) -> String {
        for _ in 0..100 {
            let newest = self
                .messages()
                .into_iter()
                .rev()
                .find(|m| m.lines().any(|l| l.starts_with("To:") && l.contains(to)));
            if let Some(message) = newest
                && !self.read.lock().unwrap().contains(&message)
                && let Some(code) = message.split_once("is ").and_then(|(_, rest)| {
                    let code: String = rest.chars().take(6).collect();
                    (code.len() == 6 && code.bytes().all(|b| b.is_ascii_digit())).then_some(code)
                })
            {
                self.read.lock().unwrap().insert(message);
                return code;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no new code arrived for {to}: {:?}", self.messages());
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
