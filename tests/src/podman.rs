//! Containers as this machine runs them: Debian's podman with runc and
//! cgroupfs, `target/containers.conf` (no default ulimits; scripts/test.sh
//! writes it) and ulimits given explicitly.

/// The platform's image as `scripts/image.sh` builds it for the tests.
pub const IMAGE: &str = "localhost/kubebyon:dev";

/// What every `podman run` of the tests takes: removed when it ends, the
/// host's network, explicit ulimits.
pub const RUN: [&str; 8] = [
    "run",
    "--rm",
    "--network",
    "host",
    "--ulimit",
    "nofile=4096:4096",
    "--ulimit",
    "nproc=4096:4096",
];

/// `podman` with the machine's runtime, cgroup manager and configuration.
pub fn podman() -> std::process::Command {
    let mut command = std::process::Command::new("podman");
    command
        .env(
            "CONTAINERS_CONF",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../target/containers.conf"),
        )
        .args(["--runtime", "runc", "--cgroup-manager=cgroupfs"]);
    command
}
