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

/// A bearer value shaped like a key Idem issues (`idem_key_<16 hex digits>_<43 base64url
/// characters>`). Anything else is refused before it costs a hash or a database query.
pub struct PresentedKey<'a>(&'a str);

impl<'a> PresentedKey<'a> {
    pub fn parse(presented: &'a str) -> Option<PresentedKey<'a>> {
        let rest = presented.strip_prefix("idem_key_")?;
        let (id, secret) = (rest.get(..ID_DIGITS)?, rest.get(ID_DIGITS..)?);
        let secret = secret.strip_prefix('_')?;
        let id_is_hex = id.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'));
        let secret_is_base64url = secret.len() == SECRET_CHARACTERS
            && secret
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_');
        (id_is_hex && secret_is_base64url).then_some(PresentedKey(presented))
    }

    pub fn hash(&self) -> ApiKeyHash {
        ApiKeyHash::of(self.0)
    }
}

/// Hex digits of a key id (8 random bytes).
const ID_DIGITS: usize = 16;
/// A key's secret: 32 random bytes in unpadded base64url.
const SECRET_CHARACTERS: usize = 43;

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
    fn only_values_shaped_like_a_key_are_looked_up() {
        let new = NewApiKey::generate();
        let parsed = PresentedKey::parse(&new.key).expect("a generated key has the shape");
        assert_eq!(parsed.hash(), new.hash);
        let (id, secret) = (new.id.as_str(), &new.key[new.key.len() - 43..]);
        for not_a_key in [
            String::new(),
            "idem_".to_owned(),
            format!("idem_{id}_"),
            format!("idem_{id}_{}", &secret[1..]),
            format!("idem_{id}_{secret}A"),
            format!("idem_{id}_{}!", &secret[1..]),
            format!("idem_{}_{secret}", id.to_uppercase()),
            format!("idem_key_zzzzzzzzzzzzzzzz_{secret}"),
            format!("xdem_{id}_{secret}"),
            "idem_key_0123456789abcdef_é".to_owned(),
            "a".repeat(69),
        ] {
            assert!(PresentedKey::parse(&not_a_key).is_none(), "{not_a_key:?}");
        }
    }

    #[test]
    fn keys_are_unique() {
        assert_ne!(NewApiKey::generate().key, NewApiKey::generate().key);
    }
}
