//! What the first request *meant*: a canonical serialisation of the normalised command and
//! everything else that changes the operation, and its SHA-256. The exact form is documented
//! in `docs/fingerprint.md` and pinned by golden vectors below: changing either is a contract
//! change and needs a new fingerprint version.

use crate::scope::Operation;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use strum::VariantArray;

/// The versions of the canonical form: the registry. Every record stores the version it was
/// fingerprinted in, and a retry is always compared in its record's version, so a version stays
/// here (its canonicaliser with it) for as long as records made in it may be retried. Adding
/// one is a variant, its number and its canonicaliser (`docs/fingerprint.md`, "Adding a
/// version"); the version new records get is chosen in one place, [`FingerprintVersion::CURRENT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, VariantArray)]
pub enum FingerprintVersion {
    /// The command as normalised by its parser, text as sent.
    V1,
    /// V1 with every text in Unicode Normalisation Form C: test-only (`docs/fingerprint.md`
    /// says why it is not shipped), so that the tests can deploy a change of canonicalisation.
    #[cfg(feature = "fingerprint-v2")]
    V2,
}

impl FingerprintVersion {
    /// The version new records are made in, unless a deploy chooses another known one
    /// (`idem serve --fingerprint-version`).
    pub const CURRENT: FingerprintVersion = FingerprintVersion::V1;

    /// The version stored as `number`, if this build knows it. A record of a version it does
    /// not know was made by a newer deploy: its retries are not for this build to judge.
    pub fn known(number: u16) -> Result<FingerprintVersion, UnknownFingerprintVersion> {
        FingerprintVersion::VARIANTS
            .iter()
            .copied()
            .find(|version| version.number() == number)
            .ok_or(UnknownFingerprintVersion(number))
    }

    /// The number stored with a record and written into the canonical form.
    pub fn number(self) -> u16 {
        match self {
            FingerprintVersion::V1 => 1,
            #[cfg(feature = "fingerprint-v2")]
            FingerprintVersion::V2 => 2,
        }
    }

    /// This version's canonicaliser: how a text of the command is written.
    fn canonical_text(self, text: &str) -> String {
        match self {
            FingerprintVersion::V1 => text.to_owned(),
            #[cfg(feature = "fingerprint-v2")]
            FingerprintVersion::V2 => unicode_normalization::UnicodeNormalization::nfc(text).collect(),
        }
    }
}

/// The number, as stored and as `--fingerprint-version` takes it.
impl fmt::Display for FingerprintVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("fingerprint version {0} is not one this build knows ({known})", known = known_numbers())]
pub struct UnknownFingerprintVersion(pub u16);

fn known_numbers() -> String {
    let numbers: Vec<String> = FingerprintVersion::VARIANTS
        .iter()
        .map(|version| version.number().to_string())
        .collect();
    numbers.join(", ")
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

impl CanonicalValue {
    /// The value with each of its texts written by `text`.
    fn with_texts(self, text: &impl Fn(&str) -> CanonicalValue) -> CanonicalValue {
        match self {
            CanonicalValue::Text(value) => text(&value),
            CanonicalValue::Integer(value) => CanonicalValue::Integer(value),
            CanonicalValue::Object(fields) => CanonicalValue::Object(
                fields
                    .into_iter()
                    .map(|(name, value)| (name, value.with_texts(text)))
                    .collect(),
            ),
        }
    }
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

    /// The fingerprint in `version`, written by that version's canonicaliser.
    pub fn compute_in<C: CanonicalCommand>(
        version: FingerprintVersion,
        input: &FingerprintInput<'_, C>,
    ) -> Fingerprint {
        let text = |value: &str| CanonicalValue::Text(version.canonical_text(value));
        let path_params = input
            .path_params
            .iter()
            .map(|(name, value)| (*name, text(value)))
            .collect();
        let command = input
            .command
            .canonical_fields()
            .into_iter()
            .map(|(name, value)| (name, value.with_texts(&text)))
            .collect();
        let document: BTreeMap<&'static str, CanonicalValue> = BTreeMap::from([
            ("apiVersion", text(input.api_version)),
            ("command", CanonicalValue::Object(command)),
            (
                "fingerprintVersion",
                CanonicalValue::Integer(i64::from(version.number())),
            ),
            ("operation", text(input.operation.as_str())),
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
        write!(f, "v{}:{}", self.version.number(), self.sha256_hex)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_version_is_found_by_its_number_and_no_other_number_is() {
        for version in FingerprintVersion::VARIANTS {
            assert_eq!(FingerprintVersion::known(version.number()), Ok(*version));
        }
        assert_eq!(FingerprintVersion::known(1), Ok(FingerprintVersion::V1));
        assert!(FingerprintVersion::VARIANTS.contains(&FingerprintVersion::CURRENT));
        let unknown = FingerprintVersion::known(99).expect_err("not a version");
        assert!(
            unknown
                .to_string()
                .starts_with("fingerprint version 99 is not one this build knows (1")
        );
        assert!(FingerprintVersion::known(0).is_err());
    }

    struct Reference(&'static str);

    impl CanonicalCommand for Reference {
        fn canonical_fields(&self) -> BTreeMap<&'static str, CanonicalValue> {
            BTreeMap::from([("merchantReference", self.0.into())])
        }
    }

    fn in_version(version: FingerprintVersion, reference: &'static str) -> Fingerprint {
        Fingerprint::compute_in(
            version,
            &FingerprintInput {
                operation: Operation::CreatePayment,
                path_params: BTreeMap::new(),
                api_version: "",
                command: &Reference(reference),
            },
        )
    }

    /// "ガ" written as one code point, and as カ with a combining voiced sound mark.
    const COMPOSED: &str = "\u{30AC}-7781";
    const DECOMPOSED: &str = "\u{30AB}\u{3099}-7781";

    #[test]
    fn version_1_keeps_text_as_sent() {
        let composed = in_version(FingerprintVersion::V1, COMPOSED);
        assert_ne!(composed, in_version(FingerprintVersion::V1, DECOMPOSED));
        assert!(composed.canonical.contains(r#""fingerprintVersion":1"#));
    }

    #[cfg(feature = "fingerprint-v2")]
    #[test]
    fn version_2_normalises_text_to_nfc_and_never_equals_version_1() {
        let composed = in_version(FingerprintVersion::V2, COMPOSED);
        assert_eq!(composed, in_version(FingerprintVersion::V2, DECOMPOSED));
        assert!(composed.canonical.contains(r#""fingerprintVersion":2"#));
        assert_ne!(
            composed.sha256_hex,
            in_version(FingerprintVersion::V1, COMPOSED).sha256_hex
        );
        assert_eq!(composed.to_string(), format!("v2:{}", composed.sha256_hex));
    }
}
