//! What the first request *meant*: a canonical serialisation of the normalised command and
//! everything else that changes the operation, and its SHA-256. The exact form is documented
//! in `docs/fingerprint.md` and pinned by golden vectors below: changing either is a contract
//! change and needs a new fingerprint version.

use crate::scope::Operation;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;

/// The version of the canonical form. Stored with every record, so that a retry is always
/// compared in the version its record was made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct FingerprintVersion(pub u16);

impl FingerprintVersion {
    pub const V1: FingerprintVersion = FingerprintVersion(1);
    pub const CURRENT: FingerprintVersion = FingerprintVersion::V1;
}

/// A value in the canonical form. Objects are ordered by key (`BTreeMap`), so the
/// serialisation never depends on the order fields arrived in or on a serde feature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum CanonicalValue {
    Text(String),
    Integer(i64),
    Object(BTreeMap<&'static str, CanonicalValue>),
}

impl From<&str> for CanonicalValue {
    fn from(text: &str) -> Self {
        CanonicalValue::Text(text.to_owned())
    }
}

impl From<String> for CanonicalValue {
    fn from(text: String) -> Self {
        CanonicalValue::Text(text)
    }
}

/// A command that knows its normalised, canonical fields (names as the API spells them).
pub trait CanonicalCommand {
    fn canonical_fields(&self) -> BTreeMap<&'static str, CanonicalValue>;
}

/// Everything the fingerprint covers, and nothing else: no `Authorization`, no
/// `Idempotency-Key`, no `Prefer`, no transport metadata.
#[derive(Debug, Clone)]
pub struct FingerprintInput<'a, C: CanonicalCommand> {
    pub operation: Operation,
    pub path_params: BTreeMap<&'static str, String>,
    pub api_version: &'a str,
    pub command: &'a C,
}

/// The canonical text (kept on the record for the console's diff of a conflicting retry)
/// and its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    pub version: FingerprintVersion,
    pub canonical: String,
    pub sha256_hex: String,
}

impl Fingerprint {
    pub fn compute<C: CanonicalCommand>(input: &FingerprintInput<'_, C>) -> Fingerprint {
        Self::compute_in(FingerprintVersion::CURRENT, input)
    }

    /// The fingerprint in a given version. Only V1 exists; a later version adds an arm here
    /// and keeps V1's, so records made under V1 stay comparable.
    pub fn compute_in<C: CanonicalCommand>(
        version: FingerprintVersion,
        input: &FingerprintInput<'_, C>,
    ) -> Fingerprint {
        let path_params = input
            .path_params
            .iter()
            .map(|(name, value)| (*name, CanonicalValue::from(value.as_str())))
            .collect();
        let document: BTreeMap<&'static str, CanonicalValue> = BTreeMap::from([
            ("apiVersion", input.api_version.into()),
            (
                "command",
                CanonicalValue::Object(input.command.canonical_fields()),
            ),
            (
                "fingerprintVersion",
                CanonicalValue::Integer(i64::from(version.0)),
            ),
            ("operation", input.operation.as_str().into()),
            ("pathParams", CanonicalValue::Object(path_params)),
        ]);
        let canonical = serde_json::to_string(&document)
            .unwrap_or_else(|_| unreachable!("strings, integers and string-keyed maps always serialise"));
        let sha256_hex = hex::encode(Sha256::digest(canonical.as_bytes()));
        Fingerprint {
            version,
            canonical,
            sha256_hex,
        }
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}:{}", self.version.0, self.sha256_hex)
    }
}
