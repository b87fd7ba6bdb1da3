//! The pinned binaries, built on first use by `tools/controlplane/build.sh` and cached.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{Error, Result};

/// The folder holding etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
/// and kwok at the versions `tools/controlplane/versions.env` names.
#[derive(Clone, Debug)]
pub struct Binaries {
    dir: PathBuf,
}

impl Binaries {
    /// Builds whatever is missing from the cache (minutes when cold, instant when warm).
    /// Build output goes to standard error as it happens.
    pub fn ensure() -> Result<Self> {
        let dir = build("tools/controlplane/build.sh")?;
        Ok(Self { dir })
    }

    /// The path of one binary, by name (`kube-apiserver`, `kubectl`, ...).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// The folder holding `clair` and `clairctl` at the version `tools/clair/go.mod` pins, built
/// on first use by `tools/clair/build.sh` (from the Go module proxy) and cached.
pub fn clair_binaries() -> Result<PathBuf> {
    build("tools/clair/build.sh")
}

/// The CoreDNS binary (only the plugins the real node uses), built on first use by
/// `tools/coredns/build.sh` from the Go module proxy and cached.
pub fn coredns_binary() -> Result<PathBuf> {
    Ok(build("tools/coredns/build.sh")?.join("coredns"))
}

/// metrics-server, built on first use by `tools/metrics-server/build.sh` from the Go module
/// proxy and cached.
pub fn metrics_server_binary() -> Result<PathBuf> {
    build("tools/metrics-server/build.sh")
}

/// Jaeger's all-in-one (the trace collector), built on first use by `tools/jaeger/build.sh`
/// from the Go module proxy and cached.
pub fn jaeger_binary() -> Result<PathBuf> {
    build("tools/jaeger/build.sh")
}

/// A real RPM database (`rpmdb.sqlite`) of `packages` packages named `rhel-load-N`, built on
/// first use by `tools/rpmdb/build.sh` with Debian's rpm tools and cached.
pub fn rpm_database(packages: usize) -> Result<PathBuf> {
    build_with("tools/rpmdb/build.sh", &[packages.to_string()])
}

/// The folder holding KEDA's `keda-operator`, `keda-adapter` and `keda-webhooks` and its CRDs
/// (`crds/`), built on first use by `tools/keda/build.sh` from the Go module proxy and cached.
pub fn keda_dir() -> Result<PathBuf> {
    build("tools/keda/build.sh")
}

/// The folder holding CloudNativePG's `manager` (the operator and the instance manager its
/// pods run) and its CRDs (`crds/`), built on first use by `tools/cloudnative-pg/build.sh`
/// from the Go module proxy and cached.
pub fn cloudnative_pg_dir() -> Result<PathBuf> {
    build("tools/cloudnative-pg/build.sh")
}

/// The Gateway API release the tests install (an HTTPRoute rule has `timeouts`).
pub const GATEWAY_API: &str = "v1.6.3";
/// The last Gateway API release whose standard HTTPRoute has no `timeouts`.
pub const GATEWAY_API_BEFORE_TIMEOUTS: &str = "v1.1.0";

/// The folder holding Gateway API's standard CRDs for HTTPRoutes, Gateways and
/// GatewayClasses at `version` (one of the two above), fetched on first use by
/// `tools/gateway-api/fetch.sh` from the Go module proxy and cached.
pub fn gateway_api_crds(version: &str) -> Result<PathBuf> {
    build_with("tools/gateway-api/fetch.sh", &[version.to_string()])
}

/// The image archives a real node imports, built by `tools/images/build.sh` (cached): the
/// paths it prints, one a line.
pub(crate) fn build_images(images: &crate::RealNodeImages) -> Result<Vec<PathBuf>> {
    let mut args: Vec<String> = images
        .clair
        .iter()
        .map(|(dir, version)| format!("{}={version}", dir.display()))
        .collect();
    if let Some(binary) = &images.operator {
        args.extend(["--operator".to_string(), binary.display().to_string()]);
    }
    // CloudNativePG's pods, where the real node's add-ons run its operator.
    args.extend([
        "--cloudnative-pg".to_string(),
        cloudnative_pg_dir()?.display().to_string(),
    ]);
    let lines = run_script("tools/images/build.sh", &args)?;
    Ok(lines
        .into_iter()
        .filter(|line| line.ends_with(".tar"))
        .map(PathBuf::from)
        .collect())
}

/// Runs a build script of the repository (build output to standard error as it happens)
/// and returns the path it prints on its last line.
fn build(script: &str) -> Result<PathBuf> {
    build_with(script, &[])
}

fn build_with(script: &str, args: &[String]) -> Result<PathBuf> {
    run_script(script, args)?
        .pop()
        .map(PathBuf::from)
        .ok_or_else(|| Error::Build(format!("{script} printed no path")))
}

/// Runs a script of the repository with `args`; returns the lines it printed.
fn run_script(script: &str, args: &[String]) -> Result<Vec<String>> {
    let script = repo_root().join(script);
    let output = Command::new("bash")
        .arg(&script)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Error::Build(format!("cannot run {}: {e}", script.display())))?;
    if !output.status.success() {
        return Err(Error::Build(format!(
            "{} exited with {}",
            script.display(),
            output.status
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}

/// The repository root: this crate lives in `testenv/` beneath it.
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."))
}
