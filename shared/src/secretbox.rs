//! Secrets at rest: the system settings' passwords and client secrets are
//! sealed with ChaCha20-Poly1305 under a key from the environment
//! (`KUBEBYON_SETTINGS_KEY`, 32 bytes in base64). The column name is bound in
//! as associated data, so a sealed value cannot be moved to another column.
//! Layout: version byte `1`, 12-byte random nonce, ciphertext and tag.
//!
//! Rotation: while the keys change, the former ones
//! (`KUBEBYON_SETTINGS_KEY_PREVIOUS`) still open what they sealed; new values
//! are always sealed under the current key, and `local reseal-settings`
//! re-seals every stored value under it (see docs/runbooks/deploy.md).

use base64::Engine;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
use secrecy::{ExposeSecret, SecretString};

const VERSION: u8 = 1;

/// SHA-256 of a secret presented to the platform (a session token, an API
/// key, a join token, an emailed code): what the database keeps of it and
/// looks it up by.
pub fn hash(secret: &str) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(secret.as_bytes()).to_vec()
}

pub struct SecretBox {
    current: LessSafeKey,
    /// Former keys: they open, never seal.
    previous: Vec<LessSafeKey>,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBox(..)")
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    #[error("KUBEBYON_SETTINGS_KEY must be 32 bytes in base64")]
    BadKey,
    #[error("a sealed value is damaged or was sealed under another key")]
    Unreadable,
}

impl SecretBox {
    /// The key from its base64 text.
    pub fn new(key: &SecretString) -> Result<Self, SealError> {
        Ok(Self {
            current: parse_key(key)?,
            previous: Vec::new(),
        })
    }

    /// Also opens what `previous` keys sealed (a rotation in progress).
    pub fn with_previous(mut self, previous: &[SecretString]) -> Result<Self, SealError> {
        self.previous = previous.iter().map(parse_key).collect::<Result<_, _>>()?;
        Ok(self)
    }

    pub fn seal(&self, column: &str, plaintext: &str) -> Vec<u8> {
        self.seal_bytes(column, plaintext.as_bytes())
    }

    /// [`seal`](Self::seal) for bytes that need not be text.
    pub fn seal_bytes(&self, column: &str, plaintext: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; 12];
        getrandom::fill(&mut nonce).expect("the operating system's random source failed");
        let mut data = plaintext.to_vec();
        self.current
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(column.as_bytes()),
                &mut data,
            )
            .expect("sealing cannot fail for in-memory sizes");
        let mut out = Vec::with_capacity(1 + 12 + data.len());
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&data);
        out
    }

    /// Opens a value sealed under the current key or a previous one.
    pub fn open(&self, column: &str, sealed: &[u8]) -> Result<SecretString, SealError> {
        self.open_with_current(column, sealed)
            .map(|(plain, _)| plain)
    }

    /// Opens a value, and says whether the current key sealed it.
    pub fn open_with_current(
        &self,
        column: &str,
        sealed: &[u8],
    ) -> Result<(SecretString, bool), SealError> {
        let (plain, current) = self.open_bytes_with_current(column, sealed)?;
        let plain = String::from_utf8(plain).map_err(|_| SealError::Unreadable)?;
        Ok((SecretString::from(plain), current))
    }

    /// Opens what [`seal_bytes`](Self::seal_bytes) sealed.
    pub fn open_bytes(&self, column: &str, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        self.open_bytes_with_current(column, sealed)
            .map(|(plain, _)| plain)
    }

    fn open_bytes_with_current(
        &self,
        column: &str,
        sealed: &[u8],
    ) -> Result<(Vec<u8>, bool), SealError> {
        if sealed.len() < 1 + 12 + 16 || sealed[0] != VERSION {
            return Err(SealError::Unreadable);
        }
        std::iter::once(&self.current)
            .chain(&self.previous)
            .enumerate()
            .find_map(|(i, key)| open_with(key, column, sealed).map(|plain| (plain, i == 0)))
            .ok_or(SealError::Unreadable)
    }
}

fn parse_key(key: &SecretString) -> Result<LessSafeKey, SealError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(key.expose_secret().trim())
        .map_err(|_| SealError::BadKey)?;
    let key = UnboundKey::new(&CHACHA20_POLY1305, &bytes).map_err(|_| SealError::BadKey)?;
    Ok(LessSafeKey::new(key))
}

fn open_with(key: &LessSafeKey, column: &str, sealed: &[u8]) -> Option<Vec<u8>> {
    let nonce = Nonce::try_assume_unique_for_key(&sealed[1..13]).ok()?;
    let mut data = sealed[13..].to_vec();
    let plain = key
        .open_in_place(nonce, Aad::from(column.as_bytes()), &mut data)
        .ok()?;
    Some(plain.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_text(byte: u8) -> SecretString {
        SecretString::from(base64::engine::general_purpose::STANDARD.encode([byte; 32]))
    }

    fn key(byte: u8) -> SecretBox {
        SecretBox::new(&key_text(byte)).unwrap()
    }

    #[test]
    fn a_sealed_value_opens_only_with_its_key_and_column() {
        let sealed = key(1).seal("smtp_password", "hunter22");
        assert!(
            !sealed.windows(8).any(|w| w == b"hunter22"),
            "the plaintext is not in the sealed bytes"
        );
        assert_eq!(
            key(1)
                .open("smtp_password", &sealed)
                .unwrap()
                .expose_secret(),
            "hunter22"
        );
        assert_eq!(
            key(2).open("smtp_password", &sealed).unwrap_err(),
            SealError::Unreadable
        );
        assert_eq!(
            key(1).open("captcha_secret", &sealed).unwrap_err(),
            SealError::Unreadable
        );
        assert_ne!(
            key(1).seal("smtp_password", "hunter22"),
            sealed,
            "a fresh nonce each time"
        );
        assert!(SecretBox::new(&SecretString::from("short".to_string())).is_err());
    }

    #[test]
    fn during_a_rotation_former_keys_open_and_only_the_new_one_seals() {
        let old = key(1).seal("smtp_password", "hunter22");
        let rotating = key(2).with_previous(&[key_text(1)]).unwrap();
        let (plain, current) = rotating.open_with_current("smtp_password", &old).unwrap();
        assert_eq!(plain.expose_secret(), "hunter22");
        assert!(!current, "sealed under a former key");
        let fresh = rotating.seal("smtp_password", "hunter22");
        assert!(
            rotating
                .open_with_current("smtp_password", &fresh)
                .unwrap()
                .1
        );
        assert_eq!(
            key(1).open("smtp_password", &fresh).unwrap_err(),
            SealError::Unreadable,
            "the former key no longer seals"
        );
        assert_eq!(
            key(2).open("smtp_password", &old).unwrap_err(),
            SealError::Unreadable,
            "without the former key, its values do not open"
        );
        assert!(
            key(2)
                .with_previous(&[SecretString::from("short".to_string())])
                .is_err()
        );
    }
}
