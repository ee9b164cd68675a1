//! The state root's secrets, and the one way a chat could read one without entering the
//! protected root: a second hard link to it somewhere the chat can read.
//!
//! The sandbox closes the state root by path (a mask on Linux, refused paths in the Seatbelt
//! profile). A hard link is another path to the same file, and nothing about it says where
//! the first one lives: a link to `config.json` in the home, made before the state root was
//! protected or by anything unconfined, hands the server token to every chat. So a launch is
//! refused while any secret has more than one link, and the secrets are only ever written by
//! renaming a new file over the old one ([`super::write::write_atomic`]): a link made to an
//! old version keeps that version, never a later one (`dispatcher init --rotate-token`).

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::StateRoot;
use super::error::{StateError, io_err};

impl StateRoot {
    /// The files whose content no chat may read: `config.json` (the server token) and every
    /// file beneath `state/auth/` (the product's own logins).
    pub fn secrets(&self) -> Result<Vec<PathBuf>, StateError> {
        let mut out = vec![self.config_json()];
        files_beneath(&self.auth_dir(), &mut out)?;
        Ok(out)
    }

    /// Fails, naming the file, when a secret has more than one hard link.
    pub fn check_secrets_unlinked(&self) -> Result<(), StateError> {
        for path in self.secrets()? {
            let meta = match fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&path, "cannot inspect")(e)),
            };
            if meta.nlink() > 1 {
                return Err(StateError::SecretLinked {
                    path,
                    links: meta.nlink(),
                });
            }
        }
        Ok(())
    }
}

/// Adds every file beneath `dir` (symlinks included, as themselves; not followed) to `out`.
fn files_beneath(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), StateError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(dir, "cannot list")(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_err(dir, "cannot list"))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(io_err(&path, "cannot inspect"))?;
        if kind.is_dir() {
            files_beneath(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (tempfile::TempDir, StateRoot) {
        let d = tempfile::tempdir().unwrap();
        let (s, _) = StateRoot::init(&d.path().join("sr"), None).unwrap();
        (d, s)
    }

    #[test]
    fn a_second_link_to_config_json_is_refused_and_named() {
        let (d, s) = root();
        s.check_secrets_unlinked().unwrap();
        let outside = d.path().join("token-copy");
        fs::hard_link(s.config_json(), &outside).unwrap();
        let err = s.check_secrets_unlinked().unwrap_err();
        assert!(
            matches!(&err, StateError::SecretLinked { path, links: 2 } if *path == s.config_json()),
            "{err}"
        );
        assert!(err.to_string().contains("-samefile"), "{err}");
        fs::remove_file(&outside).unwrap();
        s.check_secrets_unlinked().unwrap();
    }

    #[test]
    fn a_linked_login_beneath_auth_is_refused() {
        let (d, s) = root();
        let nested = s.auth_dir().join("cli");
        fs::create_dir_all(&nested).unwrap();
        let login = nested.join("token.json");
        fs::write(&login, "{}").unwrap();
        s.check_secrets_unlinked().unwrap();
        fs::hard_link(&login, d.path().join("l")).unwrap();
        assert!(matches!(
            s.check_secrets_unlinked(),
            Err(StateError::SecretLinked { path, .. }) if path == login
        ));
    }

    #[test]
    fn rotating_the_token_leaves_an_old_link_with_the_old_token() {
        let (d, mut s) = root();
        let old = s.config().server_token.clone();
        let outside = d.path().join("copy");
        fs::hard_link(s.config_json(), &outside).unwrap();
        s.rotate_token().unwrap();
        assert_ne!(s.config().server_token, old);
        let kept = fs::read_to_string(&outside).unwrap();
        assert!(kept.contains(&old) && !kept.contains(&s.config().server_token));
        // The new config.json is a new file: the link no longer counts against it.
        s.check_secrets_unlinked().unwrap();
        let reopened = StateRoot::open(s.path()).unwrap();
        assert_eq!(reopened.config().server_token, s.config().server_token);
    }
}
