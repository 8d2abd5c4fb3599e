//! Console operators: usernames, passwords (Argon2id, PHC strings), generated passwords.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};

/// A password as chosen or generated: at least 12 characters, at most 256.
pub struct Password(String);

impl Password {
    pub fn parse(text: &str) -> Result<Password, String> {
        let length = text.chars().count();
        if (12..=256).contains(&length) {
            Ok(Password(text.to_owned()))
        } else {
            Err("a password has 12 to 256 characters".to_owned())
        }
    }

    /// 24 characters from a 56-letter alphabet without look-alikes (~139 bits).
    pub fn generate() -> Password {
        const ALPHABET: &[u8] = b"abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
        let random: [u8; 24] = domain::random::random_bytes();
        // The bias of `% 56` over a byte is under 1 bit over the whole password.
        Password(
            random
                .iter()
                .map(|byte| char::from(ALPHABET[usize::from(*byte) % ALPHABET.len()]))
                .collect(),
        )
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The Argon2id PHC string stored for this password (random salt).
    pub fn hash(&self) -> String {
        let salt = SaltString::encode_b64(&domain::random::random_bytes::<16>())
            .unwrap_or_else(|error| panic!("a 16-byte salt always encodes: {error}"));
        Argon2::default()
            .hash_password(self.0.as_bytes(), &salt)
            .unwrap_or_else(|error| panic!("Argon2 with default parameters cannot fail: {error}"))
            .to_string()
    }
}

/// A generated password and its hash, made off the async workers (Argon2 spends tens of
/// milliseconds of a core).
pub async fn generated_password() -> (Password, String) {
    tokio::task::spawn_blocking(|| {
        let password = Password::generate();
        let hash = password.hash();
        (password, hash)
    })
    .await
    .unwrap_or_else(|failed| std::panic::resume_unwind(failed.into_panic()))
}

/// Whether `candidate` is the password behind `stored_hash`. Constant in the candidate (the
/// comparison happens inside Argon2); slow on purpose, so callers run it off the async runtime.
pub fn verify_password(candidate: &str, stored_hash: &str) -> bool {
    PasswordHash::new(stored_hash).is_ok_and(|hash| {
        Argon2::default()
            .verify_password(candidate.as_bytes(), &hash)
            .is_ok()
    })
}

/// A hash no password matches, verified when a username does not exist, so that the answer
/// takes as long as for a wrong password.
pub fn decoy_hash() -> &'static str {
    static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DECOY.get_or_init(|| Password::generate().hash())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_verifies_against_its_own_hash_only() {
        let password = Password::parse("correct horse battery").expect("long enough");
        let hash = password.hash();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse battery", &hash));
        assert!(!verify_password("correct horse battery!", &hash));
        assert!(!verify_password("correct horse battery", "not a hash"));
        assert_ne!(hash, password.hash(), "salted");
    }

    #[test]
    fn generated_passwords_are_long_and_distinct() {
        let (a, b) = (Password::generate(), Password::generate());
        assert_eq!(a.expose().len(), 24);
        assert_ne!(a.expose(), b.expose());
        assert!(Password::parse(a.expose()).is_ok());
        assert!(Password::parse("short").is_err());
    }
}
