//! Console sessions for tower-sessions, kept in Idem's own database (both dialects), so that
//! any instance serves any signed-in operator and sessions survive restarts. Only a SHA-256
//! of each session id is stored.

use crate::store::Store;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, SessionStore};

#[derive(Clone)]
pub struct StoreSessions {
    store: Arc<dyn Store>,
}

impl StoreSessions {
    pub fn new(store: Arc<dyn Store>) -> StoreSessions {
        StoreSessions { store }
    }
}

impl std::fmt::Debug for StoreSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreSessions")
    }
}

fn id_hash(id: &Id) -> String {
    hex::encode(Sha256::digest(id.to_string().as_bytes()))
}

fn backend_error(error: impl std::fmt::Display) -> session_store::Error {
    session_store::Error::Backend(error.to_string())
}

fn to_chrono(at: time::OffsetDateTime) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(at.unix_timestamp(), at.nanosecond()).unwrap_or_default()
}

fn encode(record: &Record) -> session_store::Result<String> {
    serde_json::to_string(&record.data).map_err(|error| session_store::Error::Encode(error.to_string()))
}

#[async_trait::async_trait]
impl SessionStore for StoreSessions {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        let data = encode(record)?;
        // A 128-bit random id colliding is next to impossible; if it happens, draw again
        // rather than overwrite someone else's session.
        while !self
            .store
            .create_session(&id_hash(&record.id), &data, to_chrono(record.expiry_date))
            .await
            .map_err(backend_error)?
        {
            record.id = Id::default();
        }
        Ok(())
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        self.store
            .save_session(
                &id_hash(&record.id),
                &encode(record)?,
                to_chrono(record.expiry_date),
            )
            .await
            .map_err(backend_error)
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let Some((data, expires_at)) = self
            .store
            .load_session(&id_hash(id))
            .await
            .map_err(backend_error)?
        else {
            return Ok(None);
        };
        let data =
            serde_json::from_str(&data).map_err(|error| session_store::Error::Decode(error.to_string()))?;
        let expiry_date = time::OffsetDateTime::from_unix_timestamp(expires_at.timestamp())
            .map_err(|error| session_store::Error::Decode(error.to_string()))?;
        Ok(Some(Record {
            id: *id,
            data,
            expiry_date,
        }))
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        self.store
            .delete_session(&id_hash(id))
            .await
            .map_err(backend_error)
    }
}
