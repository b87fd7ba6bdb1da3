//! Certificates for the control plane: a CA, the apiserver's serving certificate for
//! loopback, its client certificates towards kubelets, webhooks and aggregated API servers,
//! the add-ons' serving certificate, and the service-account signing key.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// PEM texts written into the control plane's folder.
pub(crate) struct Pki {
    pub ca_cert: String,
    pub ca_key: String,
    pub serving_cert: String,
    pub serving_key: String,
    pub service_account_key: String,
    pub service_account_public_key: String,
    /// The apiserver's client certificate towards kubelets (logs, exec, port-forward).
    pub kubelet_client_cert: String,
    pub kubelet_client_key: String,
    /// A CA of its own for the apiserver's client certificate towards admission webhooks,
    /// and that certificate ([`WEBHOOK_CLIENT_NAME`]): an operator given this CA answers the
    /// apiserver alone.
    pub webhook_client_ca: String,
    pub webhook_client_cert: String,
    pub webhook_client_key: String,
    /// The front-proxy CA and the apiserver's client certificate towards aggregated API
    /// servers (metrics-server, KEDA's metrics apiserver), which trust the request headers
    /// it sets only from a client this CA signed.
    pub front_proxy_ca: String,
    pub front_proxy_client_cert: String,
    pub front_proxy_client_key: String,
    /// A serving and client certificate signed by the cluster CA for the host processes
    /// beside a real node (metrics-server, KEDA): the node's address, loopback and the
    /// Service names KEDA's parts know each other by.
    pub addon_cert: String,
    pub addon_key: String,
}

/// The common name the apiserver's front-proxy client certificate carries.
pub const FRONT_PROXY_CLIENT_NAME: &str = "front-proxy-client";

/// The common name of the apiserver's webhook client certificate.
pub const WEBHOOK_CLIENT_NAME: &str = "kube-apiserver-webhook-client";

/// A CA named `name`: its PEM and an issuer of certificates signed by it.
fn authority(name: &str) -> Result<(String, String, Issuer<'static, KeyPair>), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key)?;
    let key_pem = key.serialize_pem();
    Ok((cert.pem(), key_pem, Issuer::new(params, key)))
}

pub(crate) fn generate() -> Result<Pki, rcgen::Error> {
    let (ca_cert_pem, ca_key_pem, issuer) = authority("clair-testenv CA")?;

    let serving_key = KeyPair::generate()?;
    // Loopback; a real node's address and the `kubernetes` Service (pods on a real node).
    let mut serving_params = CertificateParams::new(vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        crate::host::NODE_IP.to_string(),
        "10.96.0.1".to_string(),
        "kubernetes.default.svc".to_string(),
        "kubernetes.default.svc.cluster.local".to_string(),
    ])?;
    serving_params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    let serving_cert = serving_params.signed_by(&serving_key, &issuer)?;

    let kubelet_client_key = KeyPair::generate()?;
    let mut kubelet_client = CertificateParams::new(Vec::<String>::new())?;
    kubelet_client
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver-kubelet-client");
    kubelet_client
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    kubelet_client.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let kubelet_client_cert = kubelet_client.signed_by(&kubelet_client_key, &issuer)?;

    let (webhook_client_ca, _, webhook_issuer) = authority("clair-testenv webhook clients")?;
    let webhook_client_key = KeyPair::generate()?;
    let mut webhook_client = CertificateParams::new(Vec::<String>::new())?;
    webhook_client
        .distinguished_name
        .push(DnType::CommonName, WEBHOOK_CLIENT_NAME);
    webhook_client.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let webhook_client_cert = webhook_client.signed_by(&webhook_client_key, &webhook_issuer)?;

    let (front_proxy_ca, _, front_proxy_issuer) = authority("clair-testenv front proxy")?;
    let front_proxy_client_key = KeyPair::generate()?;
    let mut front_proxy_client = CertificateParams::new(Vec::<String>::new())?;
    front_proxy_client
        .distinguished_name
        .push(DnType::CommonName, FRONT_PROXY_CLIENT_NAME);
    front_proxy_client.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let front_proxy_client_cert =
        front_proxy_client.signed_by(&front_proxy_client_key, &front_proxy_issuer)?;

    let addon_key = KeyPair::generate()?;
    let mut addon = CertificateParams::new(vec![
        crate::host::NODE_IP.to_string(),
        "127.0.0.1".to_string(),
        "localhost".to_string(),
        "keda-operator.keda.svc".to_string(),
        "keda-operator.keda.svc.cluster.local".to_string(),
        "keda-metrics-apiserver.keda.svc".to_string(),
        "keda-admission-webhooks.keda.svc".to_string(),
        "metrics-server.kube-system.svc".to_string(),
    ])?;
    addon
        .distinguished_name
        .push(DnType::CommonName, "clair-testenv-addons");
    addon.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let addon_cert = addon.signed_by(&addon_key, &issuer)?;

    let service_account = KeyPair::generate()?;
    Ok(Pki {
        front_proxy_ca,
        front_proxy_client_cert: front_proxy_client_cert.pem(),
        front_proxy_client_key: front_proxy_client_key.serialize_pem(),
        addon_cert: addon_cert.pem(),
        addon_key: addon_key.serialize_pem(),
        webhook_client_ca,
        webhook_client_cert: webhook_client_cert.pem(),
        webhook_client_key: webhook_client_key.serialize_pem(),
        kubelet_client_cert: kubelet_client_cert.pem(),
        kubelet_client_key: kubelet_client_key.serialize_pem(),
        ca_cert: ca_cert_pem,
        ca_key: ca_key_pem,
        serving_cert: serving_cert.pem(),
        serving_key: serving_key.serialize_pem(),
        service_account_key: service_account.serialize_pem(),
        service_account_public_key: service_account.public_key_pem(),
    })
}
