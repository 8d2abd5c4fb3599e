//! API keys: `idem_<key id>_<secret>`, shown once, stored only as a SHA-256 hash.
//!
//! A plain hash (not a password hash) is right here: the secret is 256 random bits, so there
//! is nothing to brute-force, and every API request must verify it cheaply. The key id inside
//! the key lets an operator find and revoke a leaked key without ever storing the secret.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use domain::random::random_bytes;
use domain::tenant::ApiKeyId;
use sha2::{Digest, Sha256};
use std::fmt;

/// The stored form of a key: hex SHA-256 of the whole key string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ApiKeyHash(String);

impl ApiKeyHash {
    pub fn of(presented_key: &str) -> ApiKeyHash {
        ApiKeyHash(hex::encode(Sha256::digest(presented_key.as_bytes())))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A freshly generated key: the secret to show once, and what to store.
pub struct NewApiKey {
    pub id: ApiKeyId,
    pub key: String,
    pub hash: ApiKeyHash,
}

impl NewApiKey {
    pub fn generate() -> NewApiKey {
        let id = ApiKeyId::generate();
        let key = format!(
            "idem_{}_{}",
            id.as_str(),
            URL_SAFE_NO_PAD.encode(random_bytes::<32>())
        );
        let hash = ApiKeyHash::of(&key);
        NewApiKey { id, key, hash }
    }
}

impl fmt::Debug for NewApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The secret never reaches a log, not even through Debug.
        f.debug_struct("NewApiKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_names_its_id_and_hashes_to_its_stored_form() {
        let new = NewApiKey::generate();
        assert!(new.key.starts_with(&format!("idem_{}_", new.id)), "{}", new.key);
        assert_eq!(new.key.len(), "idem_key_".len() + 16 + 1 + 43);
        assert_eq!(ApiKeyHash::of(&new.key), new.hash);
        assert_ne!(ApiKeyHash::of(&format!("{}x", new.key)), new.hash);
        assert!(
            !format!("{new:?}").contains(&new.key[22..]),
            "Debug hides the secret"
        );
    }

    #[test]
    fn keys_are_unique() {
        assert_ne!(NewApiKey::generate().key, NewApiKey::generate().key);
    }
}
