//! What instances tell each other about the keys that seal stored responses: every key that
//! sealed something (with a probe, so that another instance can tell whether it holds the same
//! secret) and every live instance with the key ids it holds.

use super::dialect::{Dialect, SqlStore};
use super::error::StoreError;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// A sealing key some instance used against this database (a row of `response_key_checks`).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ResponseKeyCheck {
    pub key_id: String,
    /// A known plaintext sealed with the key; see `sealing::KEY_CHECK_PLAINTEXT`.
    pub probe: Vec<u8>,
    pub last_sealed_at: DateTime<Utc>,
}

/// An instance that renewed its heartbeat recently, and the key ids it can open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveInstance {
    pub instance_id: String,
    pub key_ids: Vec<String>,
}

#[async_trait::async_trait]
pub trait SealingKeyStore: Send + Sync {
    async fn response_key_checks(&self) -> Result<Vec<ResponseKeyCheck>, StoreError>;

    /// Registers this instance's sealing key (its probe is kept from the first registration)
    /// and notes that it seals with it now.
    async fn note_sealing_key(&self, key_id: &str, probe: &[u8]) -> Result<(), StoreError>;

    /// Registers `instance_id` as live now, holding `key_ids`.
    async fn instance_heartbeat(&self, instance_id: &str, key_ids: &[String]) -> Result<(), StoreError>;

    /// The instances whose last heartbeat is less than `within` old (the database's clock).
    async fn live_instances(&self, within: Duration) -> Result<Vec<LiveInstance>, StoreError>;

    /// Removes `instance_id` (it stops, or refused to start).
    async fn forget_instance(&self, instance_id: &str) -> Result<(), StoreError>;
}

/// Sealing key statements that differ by dialect.
pub trait SealingStatements {
    /// `$1` milliseconds: instance id and key ids of the instances heard from since.
    const LIVE_INSTANCES: &'static str;
}

/// `$1` key id, `$2` probe.
const NOTE_SEALING_KEY: &str = "insert into response_key_checks (key_id, probe) values ($1, $2) on conflict (key_id) do \
     update set last_sealed_at = {now}";

/// `$1` instance id, `$2` key ids (comma-separated).
const INSTANCE_HEARTBEAT: &str = "insert into sealing_instances (instance_id, key_ids) values ($1, $2) on conflict \
     (instance_id) do update set key_ids = excluded.key_ids, heartbeat_at = {now}";

/// A row of [`SealingStatements::LIVE_INSTANCES`] (key ids comma-separated).
#[derive(sqlx::FromRow)]
struct LiveInstanceRow {
    instance_id: String,
    key_ids: String,
}

#[async_trait::async_trait]
impl<D: Dialect + SealingStatements> SealingKeyStore for SqlStore<D> {
    async fn response_key_checks(&self) -> Result<Vec<ResponseKeyCheck>, StoreError> {
        Ok(
            sqlx::query_as("select key_id, probe, last_sealed_at from response_key_checks order by key_id")
                .fetch_all(&self.pool)
                .await?,
        )
    }

    async fn note_sealing_key(&self, key_id: &str, probe: &[u8]) -> Result<(), StoreError> {
        self.write_one(sqlx::query(D::sql(NOTE_SEALING_KEY)).bind(key_id).bind(probe))
            .await?;
        Ok(())
    }

    async fn instance_heartbeat(&self, instance_id: &str, key_ids: &[String]) -> Result<(), StoreError> {
        self.write_one(
            sqlx::query(D::sql(INSTANCE_HEARTBEAT))
                .bind(instance_id)
                .bind(key_ids.join(",")),
        )
        .await?;
        Ok(())
    }

    async fn live_instances(&self, within: Duration) -> Result<Vec<LiveInstance>, StoreError> {
        let millis = i64::try_from(within.as_millis()).unwrap_or(i64::MAX);
        let rows: Vec<LiveInstanceRow> = sqlx::query_as(D::LIVE_INSTANCES)
            .bind(millis)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| LiveInstance {
                instance_id: row.instance_id,
                key_ids: row.key_ids.split(',').map(str::to_owned).collect(),
            })
            .collect())
    }

    async fn forget_instance(&self, instance_id: &str) -> Result<(), StoreError> {
        self.write_one(sqlx::query("delete from sealing_instances where instance_id = $1").bind(instance_id))
            .await?;
        Ok(())
    }
}
