//! Test helpers: a fresh database of either dialect, the HTTP app on a random port, and the
//! real `idem` binary as a child process.

mod app;
mod database;
mod process;

pub use app::{OPERATOR_PASSWORD, create_operator, session_cookie, spawn_app, spawn_app_with_store};
pub use database::TestDatabase;
pub use idem::store::DialectName;
pub use process::{
    IdemProcess, TEST_RESPONSE_KEYS, admin, idem_command, seed_tenant, seed_tenant_with, serve_recovering,
};

/// Runs the same test body against PostgreSQL (a fresh database per test) and SQLite (a fresh
/// file per test): `conformance! { async fn name(db) { ... } }` makes `name::postgres` and
/// `name::sqlite`.
macro_rules! conformance {
    ($(async fn $name:ident($db:ident) $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn body($db: $crate::support::TestDatabase) $body

            #[tokio::test]
            async fn postgres() {
                body($crate::support::TestDatabase::create($crate::support::DialectName::Postgres).await).await
            }

            #[tokio::test]
            async fn sqlite() {
                body($crate::support::TestDatabase::create($crate::support::DialectName::Sqlite).await).await
            }
        }
    )*};
}
pub(crate) use conformance;
