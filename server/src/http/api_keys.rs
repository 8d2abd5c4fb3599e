//! API keys verified once, not per request: a key found valid is kept in process for
//! [`VERIFIED_FOR`], so a request costs no database round trip for its authentication. That is
//! also the bound on revocation: a revoked key stops working on every instance within
//! [`VERIFIED_FOR`] (and a tenant's settings, which ride along, change within it too). Unknown
//! and revoked keys are never kept: a new key works at once. Which keys were used is kept in
//! memory too and written every `--metrics-flush-ms` (an API key's "last used").

use crate::auth::api_key::ApiKeyHash;
use crate::metrics::Buffered;
use crate::store::{Store, StoreError, TenantStore};
use domain::tenant::Principal;
use moka::sync::Cache;
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How long a verified key is trusted without asking the database again.
pub const VERIFIED_FOR: Duration = Duration::from_secs(5);
/// Keys kept at most (each a hash and a principal: a few hundred bytes).
const CAPACITY: u64 = 100_000;

pub struct VerifiedKeys {
    verified: Cache<ApiKeyHash, Principal>,
    /// Ids of the keys used since the last flush.
    used: Mutex<HashSet<String>>,
}

impl Default for VerifiedKeys {
    fn default() -> VerifiedKeys {
        VerifiedKeys {
            verified: Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(VERIFIED_FOR)
                .build(),
            used: Mutex::default(),
        }
    }
}

impl VerifiedKeys {
    /// The principal of the key with `hash` when it was verified within [`VERIFIED_FOR`] (no
    /// database query).
    pub fn verified(&self, hash: &ApiKeyHash) -> Option<Principal> {
        let principal = self.verified.get(hash)?;
        self.note_used(&principal);
        Some(principal)
    }

    /// The principal of the key with `hash`, read from the store (and kept when valid).
    pub async fn look_up(
        &self,
        store: &dyn TenantStore,
        hash: ApiKeyHash,
    ) -> Result<Option<Principal>, StoreError> {
        let principal = store.authenticate_api_key(&hash).await?;
        if let Some(principal) = &principal {
            self.verified.insert(hash, principal.clone());
            self.note_used(principal);
        }
        Ok(principal)
    }

    /// Allocates only for the first use of a key between two flushes.
    fn note_used(&self, principal: &Principal) {
        let id = principal.api_key_id.as_str();
        let mut used = self.used();
        if !used.contains(id) {
            used.insert(id.to_owned());
        }
    }

    fn used(&self) -> MutexGuard<'_, HashSet<String>> {
        self.used.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait::async_trait]
impl Buffered for VerifiedKeys {
    /// A failed write keeps the ids for the next one.
    async fn flush(&self, store: &dyn Store) {
        let used: Vec<String> = self.used().drain().collect();
        if used.is_empty() {
            return;
        }
        if let Err(error) = store.note_api_keys_used(&used).await {
            tracing::warn!(%error, keys = used.len(), "API key use not noted; kept for the next try");
            self.used().extend(used);
        }
    }
}
