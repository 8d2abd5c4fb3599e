//! An applied migration is history. sqlx keeps each migration's checksum in
//! `_sqlx_migrations` when it runs it, and refuses to migrate a database whose applied
//! migration's file has changed since (`VersionMismatch`): an edited migration would stop every
//! deployed Idem at its next start, while every test here, on a database made from nothing,
//! would still pass. So each migration's checksum is pinned in `migrations/applied.txt`, and a
//! change to the schema is a new migration with a new line there.

use sqlx::migrate::Migrator;
use std::collections::BTreeMap;

static POSTGRES: Migrator = sqlx::migrate!("../migrations/postgres");
static SQLITE: Migrator = sqlx::migrate!("../migrations/sqlite");

/// Each migration as `migrations/applied.txt` pins it, by dialect and version: the first 16
/// hex digits of the SHA-384 sqlx stores (enough to notice an edit; nobody forges these) and
/// the description.
fn migrations_now() -> BTreeMap<String, String> {
    [("postgres", &POSTGRES), ("sqlite", &SQLITE)]
        .into_iter()
        .flat_map(|(dialect, migrator)| {
            migrator.iter().map(move |migration| {
                let checksum: String = migration.checksum[..8]
                    .iter()
                    .map(|byte| format!("{byte:02x}"))
                    .collect();
                (
                    format!("{dialect} {:04}", migration.version),
                    format!("{checksum} {}", migration.description),
                )
            })
        })
        .collect()
}

fn migrations_pinned() -> BTreeMap<String, String> {
    include_str!("../../../migrations/applied.txt")
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let mut words = line.splitn(3, ' ');
            let (dialect, version, pin) = (
                words.next().unwrap_or_default(),
                words.next().unwrap_or_default(),
                words.next().unwrap_or_default(),
            );
            (format!("{dialect} {version}"), pin.to_owned())
        })
        .collect()
}

#[test]
fn no_applied_migration_is_edited_or_removed() {
    let (now, pinned) = (migrations_now(), migrations_pinned());
    let edited: Vec<String> = pinned
        .iter()
        .filter_map(|(migration, pin)| match now.get(migration) {
            Some(checksum) if checksum != pin => Some(format!("{migration}: {pin} -> {checksum}")),
            _ => None,
        })
        .collect();
    assert!(
        edited.is_empty(),
        "applied migrations were edited: {edited:#?}; a database that ran them would refuse to \
         start. Put each file back as it was and make the change a new migration"
    );
    let removed: Vec<&String> = pinned
        .keys()
        .filter(|migration| !now.contains_key(*migration))
        .collect();
    assert!(
        removed.is_empty(),
        "applied migrations are gone: {removed:?}; a database that ran them would refuse to start"
    );
    let new: Vec<String> = now
        .iter()
        .filter(|(migration, _)| !pinned.contains_key(*migration))
        .map(|(migration, checksum)| format!("{migration} {checksum}"))
        .collect();
    assert!(
        new.is_empty(),
        "new migrations, unpinned: add these lines to migrations/applied.txt in the commit that \
         adds them (from then on they may have run anywhere):\n{}",
        new.join("\n")
    );
}
