//! `clair-dev up OPERATOR_BINARY`: the operator's main job on a local cluster. Starts the
//! control plane (building it on first use) and a PostgreSQL on loopback, installs the CRDs
//! from `crds/`, runs the operator, applies `examples/` into the `clair-demo` namespace with
//! the example Clair's connection strings pointed at that PostgreSQL, waits for the Clair
//! and the stand-alone Indexer, Matcher and Notifier to become Available, shows them, and
//! keeps everything up until Ctrl-C.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clair_testenv::{ControlPlane, Options, Postgres};

const NAMESPACE: &str = "clair-demo";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let once = args.iter().any(|a| a == "--once");
    let positional: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    match positional.as_slice() {
        [command, operator] if command.as_str() == "up" => {
            match up(Path::new(operator.as_str()), once) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("clair-dev: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => {
            eprintln!(
                "usage: clair-dev up OPERATOR_BINARY [--once]\n\n\
                 Starts a local control plane with kwok nodes, installs the CRDs, runs the\n\
                 operator, applies examples/ into namespace {NAMESPACE}, waits for the services\n\
                 to become Available and keeps running until Ctrl-C (--once: stop after\n\
                 showing them)."
            );
            ExitCode::from(2)
        }
    }
}

fn up(operator: &Path, once: bool) -> Result<(), String> {
    let root = clair_testenv::repo_root();
    let building = spinner(
        "starting the control plane (the first run builds etcd, Kubernetes and kwok from the Go \
         module proxy: about 15 minutes)",
    );
    let plane = ControlPlane::start(Options {
        nodes: 3,
        ..Options::default()
    })
    .map_err(|e| e.to_string())?;
    building.finish_with_message(format!(
        "control plane up at {} ({:.0} s)",
        plane.server(),
        building.elapsed().as_secs_f64()
    ));
    let local = root.join(".local");
    std::fs::create_dir_all(&local).map_err(|e| e.to_string())?;
    let kubeconfig = local.join("kubeconfig");
    std::fs::copy(plane.admin_kubeconfig(), &kubeconfig).map_err(|e| e.to_string())?;

    let kubectl = |args: &[&str]| run(plane.kubectl().args(args));
    plane
        .install_operator_prerequisites()
        .map_err(|e| e.to_string())?;
    let launch = clair_testenv::Launch {
        name: "operator".to_string(),
        loopback_webhook: true,
        ..Default::default()
    };
    let operator_process = plane
        .start_operator(operator, &launch)
        .map_err(|e| format!("cannot start the operator {}: {e}", operator.display()))?;
    eprintln!(
        "clair-dev: operator running, log in {}, metrics at http://{}/metrics",
        operator_process.log_path().display(),
        operator_process.metrics_address()
    );
    kubectl(&["create", "namespace", NAMESPACE])?;
    kubectl(&[
        "apply",
        "--server-side",
        "--namespace",
        NAMESPACE,
        "-f",
        &path(&root.join("examples")),
    ])?;
    // The example Clair's databases, for real: a PostgreSQL on loopback, which the
    // operator (a process on this machine) reaches to check them.
    let postgres = Postgres::start(&plane.dir().join("logs")).map_err(|e| e.to_string())?;
    let mut strings = Vec::new();
    for service in ["indexer", "matcher", "notifier"] {
        let password = format!("{service}-demo-password");
        postgres
            .create_role_and_database(service, &password)
            .map_err(|e| e.to_string())?;
        strings.push(format!(
            "  {service}: \"{}\"",
            postgres
                .connstring(service, &password, service)
                .replace('"', "\\\"")
        ));
    }
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: clair-databases\nstringData:\n{}\n",
        strings.join("\n")
    );
    run_with_input(
        plane.kubectl().args([
            "apply",
            "--server-side",
            "--force-conflicts",
            "--namespace",
            NAMESPACE,
            "-f",
            "-",
        ]),
        &secret,
    )?;
    wait_available(&plane)?;
    kubectl(&["get", "nodes"])?;
    kubectl(&[
        "get",
        "clairs,indexers,matchers,notifiers,deployments,pods,hpa,cronjobs,ingresses",
        "--namespace",
        NAMESPACE,
        "-o",
        "wide",
    ])?;
    kubectl(&["describe", "clair", "clair", "--namespace", NAMESPACE])?;

    let kubectl_path: PathBuf = plane.binaries().path("kubectl");
    println!(
        "\nThe cluster is up at {}. In another shell:\n  export KUBECONFIG={}\n  {} get clairs,indexers,matchers,notifiers -n {NAMESPACE}\n",
        plane.server(),
        kubeconfig.display(),
        kubectl_path.display()
    );
    if once {
        return Ok(());
    }
    println!("Press Ctrl-C to stop it.");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime
        .block_on(tokio::signal::ctrl_c())
        .map_err(|e| e.to_string())?;
    eprintln!("clair-dev: stopping");
    Ok(())
}

/// A spinner on standard error for a long step, with its elapsed time.
fn spinner(message: impl Into<std::borrow::Cow<'static, str>>) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new_spinner().with_message(message);
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} [{elapsed}] {msg}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

/// The example's resources, waited on with a bar of how many are Available and each one's
/// phase, for up to three minutes.
fn wait_available(plane: &ControlPlane) -> Result<(), String> {
    const WANTED: [&str; 4] = [
        "Clair/clair",
        "Indexer/indexer",
        "Matcher/matcher",
        "Notifier/notifier",
    ];
    let bar = indicatif::ProgressBar::new(WANTED.len() as u64);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed}] {pos}/{len} Available: {msg}",
    ) {
        bar.set_style(style);
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let start = std::time::Instant::now();
    loop {
        let output = plane
            .kubectl()
            .args([
                "get",
                "clairs,indexers,matchers,notifiers",
                "--namespace",
                NAMESPACE,
                "-o",
                "jsonpath={range .items[*]}{.kind}/{.metadata.name}={.status.phase}{\"\\n\"}{end}",
            ])
            .output()
            .map_err(|e| format!("kubectl: {e}"))?;
        let text = String::from_utf8_lossy(&output.stdout);
        let phases: Vec<(&str, &str)> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .filter(|(name, _)| WANTED.contains(name))
            .collect();
        let available = phases.iter().filter(|(_, p)| *p == "Available").count();
        bar.set_position(available as u64);
        bar.set_message(
            phases
                .iter()
                .map(|(name, phase)| {
                    format!("{name} {}", if phase.is_empty() { "-" } else { phase })
                })
                .collect::<Vec<_>>()
                .join(", "),
        );
        if available == WANTED.len() {
            bar.finish();
            return Ok(());
        }
        if start.elapsed() > std::time::Duration::from_secs(180) {
            bar.abandon();
            return Err(format!(
                "not every example resource is Available after 3 minutes: {text}; the operator's \
                 log: {}",
                plane.dir().join("logs/operator.log").display()
            ));
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

fn run_with_input(command: &mut Command, input: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| e.to_string())?;
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{command:?} failed with {status}"))
    }
}

fn run(command: &mut Command) -> Result<(), String> {
    let status = command.status().map_err(|e| e.to_string())?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{command:?} failed with {status}"))
    }
}
