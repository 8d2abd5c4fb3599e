//! The command parsers (a payment's body, a refund's) and the fingerprint's canonical form:
//! any bytes are parsed or refused with reasons, never a panic; the canonical form of a parsed
//! command parses back to the same fingerprint.
#![no_main]

use domain::command::CreatePayment;
use domain::fingerprint::Fingerprint;
use domain::refund::RefundBody;
use libfuzzer_sys::fuzz_target;

fn fingerprint_of(command: &CreatePayment) -> Fingerprint {
    Fingerprint::compute(&command.fingerprint_input("2026-05-01"))
}

fuzz_target!(|body: &[u8]| {
    match CreatePayment::parse_json(body) {
        Err(invalid) => assert!(!invalid.problems.is_empty(), "a refusal says why"),
        Ok(command) => {
            let first = fingerprint_of(&command);
            let canonical: serde_json::Value =
                serde_json::from_str(&first.canonical).expect("the canonical form is JSON");
            let again = CreatePayment::parse_json(canonical["command"].to_string().as_bytes())
                .expect("a canonical command parses");
            assert_eq!(fingerprint_of(&again), first, "the canonical form is a fixed point");
        }
    }
    if let Err(invalid) = RefundBody::parse_json(body) {
        assert!(!invalid.problems.is_empty(), "a refusal says why");
    }
});
