//! API keys verified once, not per request: a key found valid is kept in process for
//! [`VERIFIED_FOR`], so a request costs no database round trip for its authentication. That is
//! also the bound on revocation: a revoked key stops working on every instance within
//! [`VERIFIED_FOR`] (and a tenant's settings, which ride along, change within it too). Unknown
//! and revoked keys are never kept: a new key works at once.

use crate::auth::api_key::ApiKeyHash;
use crate::store::{StoreError, TenantStore};
use domain::tenant::Principal;
use moka::sync::Cache;
use std::time::Duration;

/// How long a verified key is trusted without asking the database again.
pub const VERIFIED_FOR: Duration = Duration::from_secs(5);
/// Keys kept at most (each a hash and a principal: a few hundred bytes).
const CAPACITY: u64 = 100_000;

pub struct VerifiedKeys {
    verified: Cache<ApiKeyHash, Principal>,
}

impl Default for VerifiedKeys {
    fn default() -> VerifiedKeys {
        VerifiedKeys {
            verified: Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(VERIFIED_FOR)
                .build(),
        }
    }
}

impl VerifiedKeys {
    /// The principal of the key with `hash`: from the keys verified within [`VERIFIED_FOR`],
    /// or from the store.
    pub async fn principal(
        &self,
        store: &dyn TenantStore,
        hash: ApiKeyHash,
    ) -> Result<Option<Principal>, StoreError> {
        if let Some(principal) = self.verified.get(&hash) {
            return Ok(Some(principal));
        }
        let principal = store.authenticate_api_key(&hash).await?;
        if let Some(principal) = &principal {
            self.verified.insert(hash, principal.clone());
        }
        Ok(principal)
    }
}
