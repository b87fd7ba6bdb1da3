//! The `clair-operator` command: the controllers (`run`), and the generators of
//! `crds/` and `state-diagrams/`.

use std::path::PathBuf;
use std::process::ExitCode;

use clair_operator::machine::diagram;
use clair_operator::{controller, crdgen};
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
    /// Run the controllers against the cluster of the current kubeconfig (or the pod's
    /// service account), until SIGTERM or Ctrl-C.
    Run,
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
        Command::Run => run(),
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
    let docs: Vec<String> = files
        .into_iter()
        .filter(|f| f.file_name != "kustomization.yaml")
        .map(|f| f.yaml)
        .collect();
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

fn run() -> Result<(), String> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let client = kube::Client::try_default()
            .await
            .map_err(|e| format!("cannot reach the cluster: {e}"))?;
        tracing::info!("clair-operator starting");
        controller::run(client, async {
            shutdown_signal().await;
            tracing::info!("shutting down");
        })
        .await;
        Ok(())
    })
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! {
                _ = ctrl_c => {},
                _ = term.recv() => {},
            }
            return;
        }
    }
    let _ = ctrl_c.await;
}
