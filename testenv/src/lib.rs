//! A real Kubernetes control plane on loopback for clair-operator's tests and local runs:
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (fake nodes whose
//! pods become Running and Ready without a container runtime), built at pinned versions by
//! `tools/controlplane/build.sh` and started in a temporary folder on free ports; and, when
//! asked, one real node (containerd, kubelet, kube-proxy, CoreDNS) where containers run, with
//! a metrics pipeline beside it (metrics-server, Prometheus, KEDA).

mod addons;
mod binaries;
pub use binaries::repo_root;
mod controlplane;
pub mod forged;
mod host;
pub mod https;
pub mod load;
mod node;
mod operator;
mod pki;
mod postgres;
mod process;
pub mod quay;
pub mod router;
pub mod scrape;

pub use addons::{Addons, Collector, cloudnative_pg_operand_image};
pub use binaries::Binaries;
pub use binaries::{
    GATEWAY_API, GATEWAY_API_BEFORE_TIMEOUTS, clair_binaries, gateway_api_crds,
    metrics_server_binary, rpm_database,
};
pub use controlplane::{ControlPlane, OPERATOR, Options, RealNodeImages, free_ports};
pub use host::{NODE_IP, POD_CIDR};
pub use operator::{Launch, OperatorProcess};
pub use pki::WEBHOOK_CLIENT_NAME;
pub use postgres::Postgres;
pub use process::Process;

/// Why the control plane could not be had. Each message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "cannot build pinned binaries: {0}\n\
         tools/controlplane/build.sh (the control plane) and tools/clair/build.sh (clair, \
         clairctl) build them from the Go module proxy with Go >= 1.24; run the script by hand \
         to see the full output."
    )]
    Build(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("cannot generate certificates: {0}")]
    Pki(#[from] rcgen::Error),
    #[error("{name} exited early ({status}); last lines of {log}:\n{tail}")]
    Exited {
        name: String,
        status: String,
        log: String,
        tail: String,
    },
    #[error("timed out after {seconds}s waiting for {what}{detail}")]
    Timeout {
        what: String,
        seconds: u64,
        detail: String,
    },
    #[error("Kubernetes client: {0}")]
    Kube(#[from] kube::Error),
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// The harness made something invalid itself (a request, a fake node): a bug here.
    #[error("the harness made an invalid {what}: {detail}")]
    Invalid { what: &'static str, detail: String },
    #[error("{0}")]
    Missing(String),
    #[error("kubectl {args} failed: {stderr}")]
    Kubectl { args: String, stderr: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}
