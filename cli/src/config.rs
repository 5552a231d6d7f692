//! The command line's own files: its configuration (the contexts, each a
//! platform and the API key signed in to it) and its cache of kubectl
//! tokens. Both are the user's alone: written with mode 0600 into a
//! directory of mode 0700, through a new file renamed into place, so no
//! reader ever sees half a file or a file others may read.

use std::{
    collections::BTreeMap,
    io::Write,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use crate::error::{CliError, Exit};

/// One platform signed in to.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Context {
    /// The platform's address, as `https://kubebyon.example.com`.
    pub url: String,
    /// The API key the device sign-in gave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// The organisation commands act in (its id); the personal one when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organization: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Config {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_context: Option<String>,
    #[serde(default)]
    pub contexts: BTreeMap<String, Context>,
}

/// Where the files live: `KUBEBYON_CONFIG_DIR`, else
/// `$XDG_CONFIG_HOME/kubebyon`, else `~/.config/kubebyon`.
pub fn dir() -> Result<PathBuf, CliError> {
    if let Some(dir) = std::env::var_os("KUBEBYON_CONFIG_DIR") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("kubebyon"));
    }
    std::env::var_os("HOME")
        .map(|home| PathBuf::from(home).join(".config").join("kubebyon"))
        .ok_or_else(|| {
            CliError::new(
                Exit::Usage,
                "no home directory: set KUBEBYON_CONFIG_DIR to where the configuration lives",
            )
        })
}

impl Config {
    pub fn path() -> Result<PathBuf, CliError> {
        Ok(dir()?.join("config.json"))
    }

    /// The configuration, or an empty one when there is none yet.
    pub fn load() -> Result<Self, CliError> {
        let path = Self::path()?;
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                CliError::new(
                    Exit::Usage,
                    format!("{} cannot be read: {e}", path.display()),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(CliError::new(
                Exit::Failure,
                format!("{}: {e}", path.display()),
            )),
        }
    }

    pub fn save(&self) -> Result<(), CliError> {
        let bytes = serde_json::to_vec_pretty(self).expect("the configuration serializes");
        write_private(&Self::path()?, &bytes)
    }
}

/// Writes `bytes` to `path` readable by its owner alone: a new file of mode
/// 0600 beside it, renamed over it.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let failed =
        |e: std::io::Error| CliError::new(Exit::Failure, format!("{}: {e}", path.display()));
    let parent = path.parent().unwrap_or(Path::new("."));
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(parent).map_err(failed)?;
    let temporary = parent.join(format!(
        ".{}.{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&temporary).map_err(failed)?;
    file.write_all(bytes).map_err(failed)?;
    file.sync_all().map_err(failed)?;
    std::fs::rename(&temporary, path).map_err(failed)
}

/// The cache of kubectl's tokens, one file a context and cluster.
pub fn credential_cache(context: &str, cluster_id: &str) -> Result<PathBuf, CliError> {
    let safe = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    Ok(dir()?
        .join("credentials")
        .join(format!("{}-{}.json", safe(context), safe(cluster_id))))
}
