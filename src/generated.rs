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

/// A folder the code generates: its files, the command that rewrites it (named when the
/// committed folder is stale), and what its command prints when given no folder.
pub trait Generator {
    type Error: From<Error>;
    /// The command that regenerates the folder.
    const FIX: &'static str;
    /// Every file of the folder.
    fn files() -> Result<Vec<GeneratedFile>, Self::Error>;
    /// What `clair-operator <generator>` prints without `--out` or `--check`.
    fn print(files: Vec<GeneratedFile>) -> String;

    /// Writes every file into `dir`.
    fn write(dir: &Path) -> Result<(), Self::Error> {
        Ok(write(dir, &Self::files()?)?)
    }

    /// Fails, naming each file and [`Generator::FIX`], when `dir` does not hold exactly
    /// what the code generates.
    fn check(dir: &Path) -> Result<(), Self::Error> {
        Ok(check(dir, &Self::files()?, Self::FIX)?)
    }
}

/// What a generator command is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Print the files (as the generator prints them).
    Print,
    /// Write them into this folder.
    Write(PathBuf),
    /// Compare them with this folder.
    Check(PathBuf),
}

impl Target {
    /// `--out DIR`, `--check DIR`, or neither (clap keeps them exclusive).
    pub fn of(out: Option<PathBuf>, check: Option<PathBuf>) -> Self {
        match (out, check) {
            (_, Some(dir)) => Self::Check(dir),
            (Some(dir), None) => Self::Write(dir),
            (None, None) => Self::Print,
        }
    }
}

/// Does what `target` asks with `G`'s files: the text to print, if any.
pub fn run<G: Generator>(target: &Target) -> Result<Option<String>, G::Error> {
    match target {
        Target::Print => Ok(Some(G::print(G::files()?))),
        Target::Write(dir) => G::write(dir).map(|()| None),
        Target::Check(dir) => G::check(dir).map(|()| None),
    }
}
