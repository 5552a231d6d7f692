//! A machine to join, for the join script run for real by a POSIX shell
//! (the node tests, and the console's browser journey).

use std::{path::Path, process::Output, time::Duration};

/// A machine to join: a directory whose `root/` the script's checks read
/// (`KUBEBYON_JOIN_ROOT`) and whose `bin/` shims the commands that would
/// otherwise describe the test machine (`uname`, `id`).
pub struct Machine {
    dir: tempdir::Dir,
}

mod tempdir {
    /// A directory removed when dropped.
    pub struct Dir(pub std::path::PathBuf);

    impl Dir {
        pub fn new() -> Self {
            let path = std::env::temp_dir().join(format!("kubebyon-join-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

pub fn executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    write(path, text);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

impl Machine {
    /// A healthy amd64 Debian machine called `hostname`, running as root,
    /// with kubeadm and the kubelet installed, as a Kamaji cluster's join
    /// needs: `kubeadm` is `tests/stand-ins/kubeadm`, which does kubeadm's
    /// token discovery and plays the kubelet's TLS bootstrap; `kubelet`
    /// only answers its version.
    pub fn healthy(hostname: &str) -> Self {
        let dir = tempdir::Dir::new();
        let root = dir.0.join("root");
        write(
            &root.join("etc/os-release"),
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n",
        );
        write(
            &root.join("sys/fs/cgroup/cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        );
        write(
            &root.join("proc/swaps"),
            "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n",
        );
        // sshd listening on 22 (0x0016); nothing on the kubelet's ports.
        write(
            &root.join("proc/net/tcp"),
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0\n",
        );
        executable(
            &dir.0.join("bin/uname"),
            &format!(
                "#!/bin/sh\ncase \"$1\" in\n  -n) echo {hostname} ;;\n  -m) echo x86_64 ;;\n  -r) echo 6.1.0-28-amd64 ;;\n  *) echo Linux ;;\nesac\n"
            ),
        );
        executable(&dir.0.join("bin/id"), "#!/bin/sh\necho 0\n");
        let python = std::env::var("KUBEBYON_TEST_PYTHON").unwrap_or_else(|_| {
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../target/test-venv/bin/python"
            )
            .to_string()
        });
        let stand_in = concat!(env!("CARGO_MANIFEST_DIR"), "/stand-ins/kubeadm");
        executable(
            &dir.0.join("bin/kubeadm"),
            &format!("#!/bin/sh\nexec '{python}' '{stand_in}' \"$@\"\n"),
        );
        executable(
            &dir.0.join("bin/kubelet"),
            "#!/bin/sh\necho 'Kubernetes v1.33.5'\n",
        );
        Self { dir }
    }

    /// Without kubeadm and the kubelet.
    pub fn without_kubeadm(self) -> Self {
        for tool in ["kubeadm", "kubelet"] {
            std::fs::remove_file(self.dir.0.join("bin").join(tool)).unwrap();
        }
        self
    }

    /// The directory: `bin/` (the shims) and `root/` (the files the checks read).
    pub fn dir(&self) -> &Path {
        &self.dir.0
    }

    pub fn root(&self) -> std::path::PathBuf {
        self.dir.0.join("root")
    }

    /// Runs a join command as the console shows it, without `sudo`.
    pub async fn run(&self, join_command: &str) -> Output {
        let command = join_command.replace("| sudo sh", "| sh");
        let path = format!(
            "{}:{}",
            self.dir.0.join("bin").display(),
            std::env::var("PATH").unwrap()
        );
        tokio::time::timeout(
            Duration::from_secs(60),
            tokio::process::Command::new("sh")
                .arg("-c")
                .arg(&command)
                .env("PATH", path)
                .env("KUBEBYON_JOIN_ROOT", self.root())
                .output(),
        )
        .await
        .expect("the join command finished")
        .unwrap()
    }
}
