//! The ingress stand-in (`clair_testenv::router`) keeps each Ingress's own timeout, as
//! ingress-nginx reads it from `nginx.ingress.kubernetes.io/proxy-read-timeout`: the
//! operator sets 600 s there for Quay's index requests (a unit test of render says so), and
//! this shows the router the tier runs honours what an Ingress says. A slow upstream (a
//! listener on the node's address answering after five seconds) sits behind two Ingresses:
//! one allowing 2 s gets a 504, one allowing 8 s gets the answer. No wait of 600 s.

use std::time::Duration;

use anyhow::{Context, ensure};
use axum::Router;
use clair_testenv::NODE_IP;
use clair_testenv::router::nginx::{READ_TIMEOUT, SEND_TIMEOUT};

use crate::fixtures::send;
use crate::support::{TestEnv, eventually};

/// How long the upstream takes to answer.
const SLOW: Duration = Duration::from_secs(5);

pub async fn the_ingress_stand_in_keeps_each_ingresss_timeout(env: &TestEnv) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = env.namespace("routing").await?;
    let router = env
        .plane
        .addons()
        .context("the real node runs no ingress stand-in")?
        .router();

    let listener = tokio::net::TcpListener::bind((NODE_IP, 0)).await?;
    let port = listener.local_addr()?.port();
    let app = Router::new().fallback(|| async {
        tokio::time::sleep(SLOW).await;
        "the slow answer"
    });
    tokio::spawn(async move { axum::serve(listener, app).await });

    // A Service without a selector whose endpoint is the listener: kube-proxy forwards its
    // cluster IP there, as for any Service.
    let mut manifest = format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: slow}}
spec:
  ports: [{{name: http, port: 80, targetPort: {port}, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: slow-node
  labels: {{kubernetes.io/service-name: slow}}
addressType: IPv4
endpoints: [{{addresses: ["{NODE_IP}"], conditions: {{ready: true}}}}]
ports: [{{name: http, port: {port}, protocol: TCP}}]
"#
    );
    for (name, seconds) in [("quick", 2), ("patient", 8)] {
        manifest.push_str(&format!(
            r#"---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  annotations: {{{READ_TIMEOUT}: "{seconds}", {SEND_TIMEOUT}: "{seconds}"}}
spec:
  rules:
  - host: {name}.{ns}.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: slow, port: {{number: 80}}}}}}}}
"#
        ));
    }
    let applied = env.kubectl_run(&ns, &["apply", "-f", "-"], Some(&manifest))?;
    ensure!(
        applied.success,
        "kubectl apply: {} {}",
        applied.stdout,
        applied.stderr
    );
    for name in ["quick", "patient"] {
        router
            .serving(&client, &ns, name, Duration::from_secs(60))
            .await?;
    }
    let agent = |name: &str| router.agent(&format!("{name}.{ns}.test"), None, SLOW * 4);
    let (quick, patient) = (agent("quick")?, agent("patient")?);
    let url = |name: &str| format!("http://{name}.{ns}.test/anything");

    // kube-proxy programs the Service a moment after it exists: until then, nginx answers 502.
    eventually(
        Duration::from_secs(60),
        "the slow Service to answer through the Ingress allowing 8 s",
        || {
            let (patient, url) = (patient.clone(), url("patient"));
            async move {
                let answer = send(&patient, "GET", url, None, None).await?;
                Ok(answer.status == 200 && answer.body == "the slow answer")
            }
        },
    )
    .await?;
    let answer = send(&quick, "GET", url("quick"), None, None).await?;
    ensure!(
        answer.status == 504,
        "the Ingress allowing 2 s should time out on an answer taking {} s: {} {}",
        SLOW.as_secs(),
        answer.status,
        answer.body
    );
    let answer = send(&patient, "GET", url("patient"), None, None).await?;
    ensure!(
        answer.status == 200,
        "the Ingress allowing 8 s should wait for the answer: {} {}",
        answer.status,
        answer.body
    );
    Ok(())
}
