//! Files the code generates into the repository (`crds/`, `state-diagrams/`): written by the
//! command line, and compared with what is committed by the tests and CI, so a change to the
//! code cannot ship with stale files.

use std::path::{Path, PathBuf};

/// One generated file: its name in its folder and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratedFile {
    pub name: String,
    pub text: String,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} file(s) in {folder} differ from the code: {}; run `{fix}`", stale.len(), stale.join(", "))]
    Stale {
        folder: String,
        fix: String,
        stale: Vec<String>,
    },
}

/// Writes every file into `dir`.
pub fn write(dir: &Path, files: &[GeneratedFile]) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Write {
        path: dir.to_owned(),
        source,
    })?;
    for file in files {
        let path = dir.join(&file.name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| Error::Write {
                path: parent.to_owned(),
                source,
            })?;
        }
        std::fs::write(&path, &file.text).map_err(|source| Error::Write { path, source })?;
    }
    Ok(())
}

/// Fails, naming each file and the command that regenerates them, when `dir` does not hold
/// exactly `files`.
pub fn check(dir: &Path, files: &[GeneratedFile], fix: &str) -> Result<(), Error> {
    let stale: Vec<String> = files
        .iter()
        .filter(|f| std::fs::read_to_string(dir.join(&f.name)).ok().as_deref() != Some(&f.text))
        .map(|f| f.name.clone())
        .collect();
    if stale.is_empty() {
        Ok(())
    } else {
        Err(Error::Stale {
            folder: dir.display().to_string(),
            fix: fix.to_string(),
            stale,
        })
    }
}
