//! Console operators: usernames, passwords (Argon2id, PHC strings), generated passwords.

use argon2::password_hash::{Output, PasswordHash, PasswordHasher, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::Semaphore;

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

/// Password checks on threads of their own, at most as many at once as there are threads; a
/// check past that is refused at once, never queued. Argon2 spends tens of milliseconds of a
/// core and 19 MiB a check: a crowd of sources, each within its own sign-in limits, would
/// otherwise take the cores payments need, and on tokio's blocking pool every new thread
/// would keep its own 19 MiB (its allocator arena) after it: fixed threads keep the memory to
/// threads x 19 MiB, each thread checking in the same memory every time.
pub struct PasswordChecks {
    /// A permit is a free thread; it goes with its job and is given back when the job ends.
    free: Arc<Semaphore>,
    jobs: std::sync::mpsc::SyncSender<PasswordJob>,
}

type PasswordJob = Box<dyn FnOnce(&mut Vec<Block>) + Send>;

impl PasswordChecks {
    /// `threads` checkers, each on a thread of its own for the life of the process.
    pub fn new(threads: usize) -> PasswordChecks {
        let threads = threads.max(1);
        // Never full: a job is sent only with a permit, and there are as many as threads.
        let (jobs, queue) = std::sync::mpsc::sync_channel::<PasswordJob>(threads);
        let queue = Arc::new(Mutex::new(queue));
        for checker in 0..threads {
            let queue = queue.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("password-check-{checker}"))
                .spawn(move || {
                    // Argon2's memory, kept for every check this thread makes.
                    let mut blocks = Vec::new();
                    loop {
                        let next = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        match next {
                            Ok(job) => job(&mut blocks),
                            Err(_) => return,
                        }
                    }
                });
            if let Err(error) = spawned {
                tracing::error!(%error, "a password checker did not start");
            }
        }
        PasswordChecks {
            free: Arc::new(Semaphore::new(threads)),
            jobs,
        }
    }

    /// Whether `password` is the one behind `hash` (a missing hash is checked against a decoy,
    /// so that both answers take as long); `None` when every checker is busy. The check runs
    /// to its end even if its caller has gone.
    pub async fn check(&self, password: String, hash: Option<String>) -> Option<bool> {
        let free = self.free.clone().try_acquire_owned().ok()?;
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: PasswordJob = Box::new(move |blocks: &mut Vec<Block>| {
            let matches =
                verify_password_in(&password, hash.as_deref().unwrap_or_else(|| decoy_hash()), blocks);
            drop(free);
            // The caller may have gone: its answer is not needed then.
            let _ = answer.send(matches);
        });
        self.jobs.try_send(job).ok()?;
        answered.await.ok()
    }

    /// Checkers free now.
    pub fn free(&self) -> usize {
        self.free.available_permits()
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
/// comparison is constant-time); slow on purpose, so callers run it off the async runtime.
pub fn verify_password(candidate: &str, stored_hash: &str) -> bool {
    verify_password_in(candidate, stored_hash, &mut Vec::new())
}

/// [`verify_password`], with Argon2's memory in `blocks` (grown to the hash's memory cost,
/// then kept): a checker that keeps its blocks allocates nothing per check. (Allocating 19 MiB
/// per check and freeing it left the memory with the allocator: glibc raises its mmap
/// threshold past a freed block, and later blocks came from heaps it keeps.)
pub fn verify_password_in(candidate: &str, stored_hash: &str, blocks: &mut Vec<Block>) -> bool {
    let Ok(hash) = PasswordHash::new(stored_hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(params), Some(expected), Some(salt)) = (
        Algorithm::try_from(hash.algorithm),
        Params::try_from(&hash),
        hash.hash,
        hash.salt,
    ) else {
        return false;
    };
    let Ok(version) = hash.version.map(Version::try_from).transpose() else {
        return false;
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    if blocks.len() < params.block_count() {
        blocks.resize(params.block_count(), Block::default());
    }
    let mut computed = vec![0u8; expected.len()];
    let argon2 = Argon2::new(algorithm, version.unwrap_or_default(), params.clone());
    argon2
        .hash_password_into_with_memory(
            candidate.as_bytes(),
            salt,
            &mut computed,
            &mut blocks[..params.block_count()],
        )
        .is_ok()
        && Output::new(&computed).is_ok_and(|computed| computed == expected)
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

    #[tokio::test]
    async fn password_checks_past_the_bound_are_refused_at_once() {
        let checks = PasswordChecks::new(1);
        let hash = Password::parse("correct horse battery")
            .expect("long enough")
            .hash();
        let held = checks.free.clone().try_acquire_owned().expect("the one checker");
        let busy = checks
            .check("correct horse battery".into(), Some(hash.clone()))
            .await;
        assert_eq!(busy, None, "refused at once");
        drop(held);
        let checked = checks.check("correct horse battery".into(), Some(hash)).await;
        assert_eq!(checked, Some(true), "the right password");
        assert_eq!(
            checks.check("a guess".into(), None).await,
            Some(false),
            "the decoy"
        );
        assert_eq!(checks.free(), 1, "each check gives its checker back");
    }

    #[tokio::test]
    async fn checks_at_once_never_exceed_the_checkers() {
        let checks = Arc::new(PasswordChecks::new(2));
        let hash = Password::parse("correct horse battery")
            .expect("long enough")
            .hash();
        let answers = futures_util::future::join_all((0..8).map(|_| {
            let (checks, hash) = (checks.clone(), hash.clone());
            async move { checks.check("correct horse battery".into(), Some(hash)).await }
        }))
        .await;
        let checked = answers.iter().filter(|answer| answer.is_some()).count();
        assert!(
            (2..8).contains(&checked),
            "two at once, the rest refused: {answers:?}"
        );
        assert!(answers.iter().flatten().all(|matches| *matches));
    }

    #[test]
    fn checking_in_kept_memory_agrees_with_argon2s_own_check() {
        use argon2::PasswordVerifier;
        let light = Argon2::new(
            Algorithm::Argon2id,
            Version::V0x13,
            Params::new(256, 1, 1, None).expect("params"),
        );
        let salt = SaltString::encode_b64(b"sixteen byte slt").expect("salt");
        let stored = [
            Password::parse("correct horse battery")
                .expect("long enough")
                .hash(),
            light
                .hash_password(b"correct horse battery", &salt)
                .expect("hash")
                .to_string(),
        ];
        let mut blocks = Vec::new();
        for stored in &stored {
            let parsed = PasswordHash::new(stored).expect("a PHC string");
            for candidate in ["correct horse battery", "correct horse battery!", ""] {
                let argon2s = Argon2::default()
                    .verify_password(candidate.as_bytes(), &parsed)
                    .is_ok();
                assert_eq!(
                    verify_password_in(candidate, stored, &mut blocks),
                    argon2s,
                    "{candidate:?} {stored}"
                );
            }
        }
        assert_eq!(blocks.len(), 19_456, "kept at the largest cost seen (19 MiB)");
        assert!(!verify_password_in(
            "x",
            "$argon2id$v=19$m=8,t=1,p=1$bm90IGEgc2FsdA$",
            &mut blocks
        ));
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
