//! Stored responses are sensitive: they are sealed (ChaCha20-Poly1305, an AEAD) before they
//! reach the database and opened on replay. The scoped key is the associated data, so a
//! sealed body cannot be moved to another record. Every sealed body names its key id, so keys
//! can rotate: the first configured key seals, every configured key opens.
//!
//! Format: `idem1` · key id length (1 byte) · key id · nonce (12 bytes) · ciphertext.
//!
//! Instances sharing a database must be able to open each other's bodies. Each one registers
//! the key ids it holds and renews that every heartbeat. One that would seal with a key a live
//! instance lacks refuses to start (add a key everywhere first, then make it the sealing key);
//! one that finds a key in use it cannot open (it was paused while that happened, or its keys
//! differ) reports itself not ready until that is fixed, and answers replays it cannot open
//! with a retryable 503, never a 500.

use crate::store::SealingKeyStore;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, KeyInit, Nonce};
use chrono::Utc;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

const MAGIC: &[u8] = b"idem1";
const KEY_FILE: &str = "response-keys";

#[derive(Debug, thiserror::Error)]
pub enum SealingError {
    #[error("response keys must look like `id:base64-of-32-bytes[,id:…]`: {0}")]
    InvalidKeys(String),
    #[error("cannot read or write the response key file {path}: {source}")]
    KeyFile { path: String, source: std::io::Error },
    #[error("a stored response cannot be opened: {0}")]
    CannotOpen(&'static str),
    #[error("a stored response was sealed with the key `{0}`, which this instance does not hold")]
    KeyNotHeld(String),
    #[error(
        "this instance would seal with the key `{key_id}`, which the live instance {instance_id} \
         does not hold; add the key to every instance's --response-keys (after the sealing \
         key) first, then make it the first"
    )]
    KeyNotHeldByLiveInstance { key_id: String, instance_id: String },
    #[error(
        "the response key `{0}` is not the key stored responses were sealed with under that id; \
         start every instance with the same --response-keys (or restore the original key file)"
    )]
    KeyDiffers(String),
    #[error(
        "responses sealed with the key `{key_id}` (last used {last_sealed_at}) may still be stored, \
         and this instance does not have that key; add it to --response-keys"
    )]
    KeyMissing { key_id: String, last_sealed_at: String },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// What a key check seals; its associated data names no record, so a probe can never be
/// mistaken for a response.
const KEY_CHECK_PLAINTEXT: &[u8] = b"idem response key check";
const KEY_CHECK_SCOPE: &[u8] = b"|response_key_checks|";

pub struct ResponseSealer {
    current_id: String,
    keys: BTreeMap<String, ChaCha20Poly1305>,
    /// Why this instance cannot open every stored response right now, if it cannot.
    unready: Mutex<Option<String>>,
}

impl ResponseSealer {
    /// `id:base64,id:base64…`; the first key seals, all of them open.
    pub fn from_spec(spec: &str) -> Result<ResponseSealer, SealingError> {
        let mut current_id = None;
        let mut keys = BTreeMap::new();
        for entry in spec.split(',').map(str::trim).filter(|entry| !entry.is_empty()) {
            let (id, encoded) = entry
                .split_once(':')
                .ok_or_else(|| SealingError::InvalidKeys("an entry has no ':'".into()))?;
            if id.is_empty()
                || id.len() > 32
                || !id
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
            {
                return Err(SealingError::InvalidKeys(format!("bad key id {id:?}")));
            }
            let bytes = STANDARD
                .decode(encoded)
                .map_err(|_| SealingError::InvalidKeys(format!("key {id} is not base64")))?;
            if bytes.len() != 32 {
                return Err(SealingError::InvalidKeys(format!("key {id} is not 32 bytes")));
            }
            keys.insert(id.to_owned(), ChaCha20Poly1305::new(Key::from_slice(&bytes)));
            current_id.get_or_insert_with(|| id.to_owned());
        }
        let current_id = current_id.ok_or_else(|| SealingError::InvalidKeys("no key".into()))?;
        Ok(ResponseSealer {
            current_id,
            keys,
            unready: Mutex::new(None),
        })
    }

    /// The embedded default: the key file in the data directory, created (mode 0600) with a
    /// new random key on first run.
    pub fn load_or_create(data_dir: &Path) -> Result<ResponseSealer, SealingError> {
        let path = data_dir.join(KEY_FILE);
        let file_error = |source| SealingError::KeyFile {
            path: path.display().to_string(),
            source,
        };
        if !path.exists() {
            crate::files::create_private_dir(data_dir).map_err(file_error)?;
            let spec = format!("k1:{}", STANDARD.encode(domain::random::random_bytes::<32>()));
            write_private(&path, &spec).map_err(file_error)?;
            tracing::info!(path = %path.display(), "generated the response sealing key");
        }
        crate::files::warn_if_readable_by_others(&path);
        let spec = std::fs::read_to_string(&path).map_err(file_error)?;
        Self::from_spec(&spec)
    }

    /// Registers `instance_id` and the keys it holds, then checks that this instance holds
    /// every key that sealed responses which may still be replayed (`horizon`: the longest a
    /// sealed body can be replayed after it was sealed), and that every live instance (heard
    /// from within `live_within`) holds the key this one seals with. Refuses to start rather
    /// than answer replays with errors. Registering first means that of two instances
    /// starting at once, at least one sees the other; checking the keys in use again once its
    /// own is noted means that of two starting at once with different secrets under one key
    /// id, the one whose probe was not kept refuses.
    pub async fn join(
        &self,
        store: &dyn SealingKeyStore,
        instance_id: &str,
        horizon: Duration,
        live_within: Duration,
    ) -> Result<(), SealingError> {
        store.instance_heartbeat(instance_id, &self.key_ids()).await?;
        let checked = match self.check_keys_in_use(store, horizon).await {
            Ok(()) => self.check_live_instances(store, instance_id, live_within).await,
            refused => refused,
        };
        let checked = match checked {
            Ok(()) => match self.note_in_use(store).await {
                Ok(()) => self.check_keys_in_use(store, horizon).await,
                failed => failed,
            },
            refused => refused,
        };
        if let Err(refusal) = checked {
            if let Err(error) = store.forget_instance(instance_id).await {
                tracing::warn!(%error, "a refused instance stays registered until its heartbeat ages");
            }
            return Err(refusal);
        }
        Ok(())
    }

    /// Renews this instance's registration and its sealing key's use, and checks the keys in
    /// use again: an instance that cannot open one is not ready until it can.
    pub async fn heartbeat(
        &self,
        store: &dyn SealingKeyStore,
        instance_id: &str,
        horizon: Duration,
    ) -> Result<(), SealingError> {
        store.instance_heartbeat(instance_id, &self.key_ids()).await?;
        self.note_in_use(store).await?;
        let now_unready = self
            .check_keys_in_use(store, horizon)
            .await
            .err()
            .map(|error| error.to_string());
        let mut unready = self
            .unready
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match (&*unready, &now_unready) {
            (None, Some(reason)) => tracing::error!(%reason, "not ready: a response key in use is missing"),
            (Some(_), None) => tracing::info!("every response key in use is held again: ready"),
            _ => {}
        }
        *unready = now_unready;
        Ok(())
    }

    /// Removes this instance's registration (at shutdown), so that its successor need not
    /// wait for it to age.
    pub async fn leave(&self, store: &dyn SealingKeyStore, instance_id: &str) -> Result<(), SealingError> {
        Ok(store.forget_instance(instance_id).await?)
    }

    /// Why this instance cannot open every stored response, if it cannot.
    pub fn unready_reason(&self) -> Option<String> {
        self.unready
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn key_ids(&self) -> Vec<String> {
        self.keys.keys().cloned().collect()
    }

    async fn check_live_instances(
        &self,
        store: &dyn SealingKeyStore,
        instance_id: &str,
        live_within: Duration,
    ) -> Result<(), SealingError> {
        let lacking = store
            .live_instances(live_within)
            .await?
            .into_iter()
            .find(|live| live.instance_id != instance_id && !live.key_ids.contains(&self.current_id));
        match lacking {
            Some(live) => Err(SealingError::KeyNotHeldByLiveInstance {
                key_id: self.current_id.clone(),
                instance_id: live.instance_id,
            }),
            None => Ok(()),
        }
    }

    async fn check_keys_in_use(
        &self,
        store: &dyn SealingKeyStore,
        horizon: Duration,
    ) -> Result<(), SealingError> {
        let still_replayable_since = Utc::now() - chrono::Duration::from_std(horizon).unwrap_or_default();
        for check in store.response_key_checks().await? {
            let opens = self
                .open(KEY_CHECK_SCOPE, &check.probe)
                .is_ok_and(|plaintext| plaintext == KEY_CHECK_PLAINTEXT);
            if opens {
                continue;
            }
            if self.keys.contains_key(&check.key_id) {
                return Err(SealingError::KeyDiffers(check.key_id));
            }
            if check.last_sealed_at > still_replayable_since {
                return Err(SealingError::KeyMissing {
                    key_id: check.key_id,
                    last_sealed_at: check.last_sealed_at.to_rfc3339(),
                });
            }
        }
        Ok(())
    }

    /// Notes that this instance seals with its current key now (for other instances' checks).
    async fn note_in_use(&self, store: &dyn SealingKeyStore) -> Result<(), SealingError> {
        let probe = self.seal(KEY_CHECK_SCOPE, KEY_CHECK_PLAINTEXT);
        Ok(store.note_sealing_key(&self.current_id, &probe).await?)
    }

    pub fn seal(&self, associated: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let nonce_bytes = domain::random::random_bytes::<12>();
        let cipher = &self.keys[&self.current_id];
        // Encryption only fails for inputs beyond ChaCha20's 256 GiB limit; bodies are capped
        // far below by the request limit.
        let ciphertext = cipher
            .encrypt(
                Nonce::from_slice(&nonce_bytes),
                Payload {
                    msg: plaintext,
                    aad: associated,
                },
            )
            .unwrap_or_else(|_| panic!("sealing a response body of {} bytes failed", plaintext.len()));
        let mut sealed = Vec::with_capacity(MAGIC.len() + 1 + self.current_id.len() + 12 + ciphertext.len());
        sealed.extend_from_slice(MAGIC);
        sealed.push(self.current_id.len() as u8);
        sealed.extend_from_slice(self.current_id.as_bytes());
        sealed.extend_from_slice(&nonce_bytes);
        sealed.extend_from_slice(&ciphertext);
        sealed
    }

    pub fn open(&self, associated: &[u8], sealed: &[u8]) -> Result<Vec<u8>, SealingError> {
        let rest = sealed
            .strip_prefix(MAGIC)
            .ok_or(SealingError::CannotOpen("not a sealed body"))?;
        let (&id_len, rest) = rest.split_first().ok_or(SealingError::CannotOpen("truncated"))?;
        if rest.len() < id_len as usize + 12 {
            return Err(SealingError::CannotOpen("truncated"));
        }
        let (id, rest) = rest.split_at(id_len as usize);
        let (nonce, ciphertext) = rest.split_at(12);
        let id = std::str::from_utf8(id).map_err(|_| SealingError::CannotOpen("bad key id"))?;
        let cipher = self
            .keys
            .get(id)
            .ok_or_else(|| SealingError::KeyNotHeld(id.to_owned()))?;
        cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: associated,
                },
            )
            .map_err(|_| SealingError::CannotOpen("authentication failed"))
    }
}

#[cfg(unix)]
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> String {
        STANDARD.encode([byte; 32])
    }

    #[test]
    fn a_sealed_body_opens_only_with_its_key_and_its_record() {
        let sealer = ResponseSealer::from_spec(&format!("k2:{},k1:{}", key(2), key(1))).expect("keys");
        let sealed = sealer.seal(b"ten_1|create_payment|abc", br#"{"paymentId":"pay_1"}"#);
        assert!(
            !sealed.windows(7).any(|window| window == b"pay_1\"}"),
            "no plaintext in the stored bytes"
        );
        assert_eq!(
            sealer.open(b"ten_1|create_payment|abc", &sealed).expect("opens"),
            br#"{"paymentId":"pay_1"}"#
        );
        assert!(
            sealer.open(b"ten_1|create_payment|other", &sealed).is_err(),
            "bound to its record"
        );

        // Rotation: a sealer whose current key is k3 still opens what k2 sealed.
        let rotated = ResponseSealer::from_spec(&format!("k3:{},k2:{}", key(3), key(2))).expect("keys");
        assert!(rotated.open(b"ten_1|create_payment|abc", &sealed).is_ok());
        let without_k2 = ResponseSealer::from_spec(&format!("k3:{}", key(3))).expect("keys");
        assert!(without_k2.open(b"ten_1|create_payment|abc", &sealed).is_err());
    }

    #[test]
    fn bad_key_specs_are_refused_with_a_reason() {
        for spec in [
            "",
            "k1",
            "k1:notbase64!",
            &format!("k1:{}", STANDARD.encode([0_u8; 16])),
            "bad id:AAAA",
        ] {
            assert!(ResponseSealer::from_spec(spec).is_err(), "{spec:?}");
        }
    }

    #[test]
    fn the_embedded_key_is_created_once_and_kept_private() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let first = ResponseSealer::load_or_create(dir.path()).expect("created");
        let sealed = first.seal(b"scope", b"body");
        let again = ResponseSealer::load_or_create(dir.path()).expect("loaded");
        assert_eq!(again.open(b"scope", &sealed).expect("same key"), b"body");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .expect("file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
