//! Randomness for ids and secrets: the operating system's generator, nothing weaker.

pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0_u8; N];
    // The operating system's generator failing is not something Idem can work around; no key
    // (and no id) may ever be made from anything weaker.
    getrandom::fill(&mut bytes).unwrap_or_else(|error| panic!("the OS random generator failed: {error}"));
    bytes
}

/// `bytes` random bytes (at most 32) as lower-case hex.
pub fn random_hex(bytes: usize) -> String {
    let random: [u8; 32] = random_bytes();
    hex::encode(&random[..bytes.min(32)])
}
