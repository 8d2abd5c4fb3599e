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

/// `prefix`, the milliseconds since 1970 as 12 hex digits, then 8 random bytes as hex. An id
/// made later sorts after one made earlier, so a table keyed by these ids, and every index
/// that holds them, takes each new row at its end: on a large SQLite file a random id puts
/// each insert on a page of its own, spread over the file, and a commit writes every such
/// page whole into the WAL (docs/performance.md). The random part keeps ids unguessable and
/// distinct within a millisecond.
pub fn ordered_id(prefix: &str) -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis());
    format!("{prefix}{:012x}{}", millis & 0xffff_ffff_ffff, random_hex(8))
}

#[cfg(test)]
mod tests {
    use super::ordered_id;

    #[test]
    fn an_id_made_in_a_later_millisecond_sorts_after_and_every_id_is_its_own() {
        let first = ordered_id("pay_");
        let digits = first.strip_prefix("pay_").expect("the prefix");
        assert_eq!(digits.len(), 28, "{first}: 12 digits of time, 16 random");
        assert!(
            digits
                .bytes()
                .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)),
            "{first}: lower-case hex"
        );
        let later = std::iter::repeat_with(|| ordered_id("pay_"))
            .find(|id| id[..16] != first[..16])
            .expect("the clock moves on");
        assert!(later > first, "{later} sorts after {first}");
        let same_millisecond: std::collections::BTreeSet<_> =
            (0..1_000).map(|_| ordered_id("pay_")).collect();
        assert_eq!(same_millisecond.len(), 1_000, "no id made twice");
    }
}
