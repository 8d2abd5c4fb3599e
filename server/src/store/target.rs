//! Which database a command uses: PostgreSQL named by `DATABASE_URL`, or the embedded SQLite
//! file in the data directory when it is unset.

use super::error::StoreError;
use std::path::{Path, PathBuf};

/// The dialect a target speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DialectName {
    Postgres,
    Sqlite,
}

/// Which database to use, decided once from `DATABASE_URL` (or its absence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseTarget {
    Postgres {
        url: String,
    },
    Sqlite {
        url: String,
    },
    /// The embedded default: a SQLite file in the data directory.
    EmbeddedSqlite {
        path: PathBuf,
    },
}

impl DatabaseTarget {
    pub const EMBEDDED_FILE_NAME: &'static str = "idem.db";

    pub fn resolve(database_url: Option<&str>, data_dir: &Path) -> Result<Self, StoreError> {
        match database_url.map(str::trim) {
            None | Some("") => Ok(DatabaseTarget::EmbeddedSqlite {
                path: data_dir.join(Self::EMBEDDED_FILE_NAME),
            }),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(DatabaseTarget::Postgres { url: url.to_owned() })
            }
            Some(url) if url.starts_with("sqlite:") => Ok(DatabaseTarget::Sqlite { url: url.to_owned() }),
            Some(_) => Err(StoreError::UnsupportedUrl),
        }
    }

    pub fn dialect(&self) -> DialectName {
        match self {
            DatabaseTarget::Postgres { .. } => DialectName::Postgres,
            DatabaseTarget::Sqlite { .. } | DatabaseTarget::EmbeddedSqlite { .. } => DialectName::Sqlite,
        }
    }

    /// A description safe for logs: never a password.
    pub fn redacted(&self) -> String {
        match self {
            DatabaseTarget::Postgres { url } => redact_password(url),
            DatabaseTarget::Sqlite { url } => url.clone(),
            DatabaseTarget::EmbeddedSqlite { path } => format!("sqlite://{}", path.display()),
        }
    }
}

fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((credentials, host)) => match credentials.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_empty_database_url_means_the_embedded_sqlite_file() {
        for url in [None, Some(""), Some("  ")] {
            assert_eq!(
                DatabaseTarget::resolve(url, Path::new("/var/idem")).expect("resolves"),
                DatabaseTarget::EmbeddedSqlite {
                    path: PathBuf::from("/var/idem/idem.db")
                }
            );
        }
    }

    #[test]
    fn the_scheme_chooses_the_dialect() {
        let dir = Path::new("data");
        let pg = DatabaseTarget::resolve(Some("postgresql://u@h/db"), dir).expect("postgres");
        assert_eq!(pg.dialect(), DialectName::Postgres);
        let lite = DatabaseTarget::resolve(Some("sqlite://x.db"), dir).expect("sqlite");
        assert_eq!(lite.dialect(), DialectName::Sqlite);
        assert!(matches!(
            DatabaseTarget::resolve(Some("mysql://u@h/db"), dir),
            Err(StoreError::UnsupportedUrl)
        ));
    }

    #[test]
    fn passwords_never_reach_a_log_line() {
        let target = DatabaseTarget::Postgres {
            url: "postgres://idem:s3cr3t@db.internal:5432/idem?sslmode=require".into(),
        };
        assert_eq!(
            target.redacted(),
            "postgres://idem:***@db.internal:5432/idem?sslmode=require"
        );
        let no_password = DatabaseTarget::Postgres {
            url: "postgres://idem@db/idem".into(),
        };
        assert_eq!(no_password.redacted(), "postgres://idem@db/idem");
    }
}
