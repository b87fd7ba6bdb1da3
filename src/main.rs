//! The `clair-operator` command: the controller and webhooks (later), and the generators of
//! `crds/` and `state-diagrams/`.

use std::path::PathBuf;
use std::process::ExitCode;

use clair_operator::crdgen;
use clair_operator::machine::diagram;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "clair-operator",
    version,
    about = "Runs Clair on Kubernetes as separate, independently scaled services"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions as YAML, or write one file per CRD.
    Crds {
        /// Write `<crd name>.yaml` files into this folder instead of printing.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Exit 1 when the files in this folder differ from what the code generates.
        #[arg(long, conflicts_with = "out")]
        check: Option<PathBuf>,
    },
    /// Draw the phase state machines as Mermaid diagrams, or write them into a folder.
    Diagrams {
        /// Write `service.mmd`, `clair.mmd` and `README.md` into this folder.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Exit 1 when the files in this folder differ from what the code draws.
        #[arg(long, conflicts_with = "out")]
        check: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Crds { out, check } => crds(out, check),
        Command::Diagrams { out, check } => diagrams(out, check),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn crds(out: Option<PathBuf>, check: Option<PathBuf>) -> Result<(), String> {
    if let Some(dir) = check {
        return crdgen::check(&dir).map_err(|e| e.to_string());
    }
    if let Some(dir) = out {
        return crdgen::write(&dir).map_err(|e| e.to_string());
    }
    let files = crdgen::files().map_err(|e| e.to_string())?;
    let docs: Vec<String> = files.into_iter().map(|f| f.yaml).collect();
    print!("{}", docs.join("---\n"));
    Ok(())
}

fn diagrams(out: Option<PathBuf>, check: Option<PathBuf>) -> Result<(), String> {
    if let Some(dir) = check {
        return diagram::check(&dir).map_err(|e| e.to_string());
    }
    if let Some(dir) = out {
        return diagram::write(&dir).map_err(|e| e.to_string());
    }
    for file in diagram::files()
        .into_iter()
        .filter(|f| f.file_name.ends_with(".mmd"))
    {
        println!("%% {}\n{}", file.file_name, file.text);
    }
    Ok(())
}
