//! Who is calling: tenants and their API keys (the payments API), operators (the console).

pub mod api_key;
pub mod operator;
pub mod tenant;

pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0_u8; N];
    // The operating system's generator failing is not something Idem can work around; no key
    // (and no id) may ever be made from anything weaker.
    getrandom::fill(&mut bytes).unwrap_or_else(|error| panic!("the OS random generator failed: {error}"));
    bytes
}

pub(crate) fn random_hex(bytes: usize) -> String {
    let random: [u8; 32] = random_bytes();
    hex::encode(&random[..bytes.min(32)])
}

/// The caller of a payments API request, as established by its API key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant_id: tenant::TenantId,
    pub api_key_id: api_key::ApiKeyId,
    pub require_idempotency_key: bool,
    pub pinned_api_version: String,
}
