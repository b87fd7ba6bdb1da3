//! Reading a config as Clair finds it on disk: the root file and the drop-ins in the folder
//! beside it (`config.yaml.d/`), files only, in lexical order.

use std::path::{Path, PathBuf};

use super::Document;

fn document(path: &Path) -> std::io::Result<Document> {
    let key = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    Ok(Document {
        name: path.display().to_string(),
        key,
        text: std::fs::read_to_string(path)?,
        secret: false,
    })
}

/// The root document at `path` and its drop-ins. A missing drop-in folder is fine, as it is
/// for Clair.
pub fn read(path: &Path) -> std::io::Result<(Document, Vec<Document>)> {
    let root = document(path)?;
    let folder = PathBuf::from(format!("{}.d", path.display()));
    let mut dropins = Vec::new();
    if folder.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&folder)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        entries.sort();
        for entry in entries {
            dropins.push(document(&entry)?);
        }
    }
    Ok((root, dropins))
}
