//! Idem's own files: its data directory holds the embedded database, the response sealing
//! key and (with `scripts/run`) the demo API key, so it is made for its owner only.

use std::path::Path;

/// Creates `dir` and any missing parent, each new one readable by its owner only (an existing
/// directory keeps the mode it has).
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Logs a warning when `path` can be read by its group or by others: a secret there is
/// readable by every account on the machine.
pub fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(metadata) = std::fs::metadata(path)
        && metadata.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            path = %path.display(),
            mode = format!("{:o}", metadata.permissions().mode() & 0o777),
            "a secret file is readable by other accounts: chmod 600 it"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_new_data_directory_is_its_owners_only() {
        let root = tempfile::tempdir().expect("temp dir");
        let data = root.path().join("a/data");
        create_private_dir(&data).expect("created");
        for dir in [root.path().join("a"), data.clone()] {
            let mode = std::fs::metadata(&dir).expect("metadata").permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{}", dir.display());
        }
        create_private_dir(&data).expect("an existing directory is fine");
    }
}
