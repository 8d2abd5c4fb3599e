//! The `Idempotency-Key` parser: a key is accepted exactly when the contract allows it (1 to
//! 255 visible ASCII characters) and keeps its bytes; anything else is refused, never a panic.
#![no_main]

use domain::key::IdempotencyKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|raw: &[u8]| {
    let allowed = (1..=255).contains(&raw.len()) && raw.iter().all(|byte| (0x21..=0x7E).contains(byte));
    match IdempotencyKey::parse(raw) {
        Ok(key) => {
            assert!(allowed, "accepted a key the contract refuses: {raw:?}");
            assert_eq!(key.as_str().as_bytes(), raw, "a key keeps its bytes");
        }
        Err(_) => assert!(!allowed, "refused a key the contract allows: {raw:?}"),
    }
});
