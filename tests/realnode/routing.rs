//! The ingress stand-in (`clair_testenv::router`) keeps each Ingress's own timeout, as
//! ingress-nginx reads it from `nginx.ingress.kubernetes.io/proxy-read-timeout`: the
//! operator sets 600 s there for Quay's index requests (a unit test of render says so), and
//! this shows the router the tier runs honours what an Ingress says. A slow upstream (a
//! listener on the node's address answering after five seconds) sits behind two Ingresses:
//! one allowing 2 s gets a 504, one allowing 8 s gets the answer. No wait of 600 s. And the
//! operator's HTTPRoute, attached to a Gateway of the stand-in's class, carries a request
//! to each of a real Clair's three services, which answer through it as they answer at
//! their own Services (its 600 s `timeouts.request` where the installed CRD keeps the
//! field: `docs/quay.md`).

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use axum::Router;
use clair_testenv::NODE_IP;
use clair_testenv::router::nginx::{READ_TIMEOUT, SEND_TIMEOUT};

use crate::fixtures::{FixtureServer, agent_within, send};
use crate::scan::{
    START, airgapped_dropin, behind_service, quay_token, restricted_namespace, service_url,
    until_available,
};
use crate::support::clair::{create_clair, external_databases, external_spec};
use crate::support::{TestEnv, eventually, install_gateway_api};

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

pub async fn the_operators_http_route_reaches_each_service_through_a_gateway(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let ns = restricted_namespace(env, "gateway").await?;
    let result = http_route_in(env, &ns).await;
    // The node has two cores: the tests after this one need its Clair's CPU requests.
    let released = crate::autoscaling::release(env, &ns).await;
    result.and(released)
}

async fn http_route_in(env: &TestEnv, ns: &str) -> anyhow::Result<()> {
    let ns = ns.to_string();
    let client = env.client().await?;
    let router = env
        .plane
        .addons()
        .context("the real node runs no ingress stand-in")?
        .router();
    // Gateway API as released (whose HTTPRoute keeps a rule's `timeouts`), and a Gateway of
    // the stand-in's class.
    install_gateway_api(env, clair_testenv::GATEWAY_API)?;
    let gateway = format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: public}}
spec:
  gatewayClassName: {}
  listeners: [{{name: http, protocol: HTTP, port: 80}}]
"#,
        clair_testenv::router::CLASS
    );
    let applied = env.kubectl_run(&ns, &["apply", "-f", "-"], Some(&gateway))?;
    ensure!(applied.success, "kubectl apply: {}", applied.stderr);

    external_databases(env, &client, &ns).await?;
    let server = FixtureServer::for_scans(&[]).await?;
    airgapped_dropin(&client, &ns, &server).await?;
    let host = format!("clair.{ns}.test");
    let mut spec = external_spec();
    spec["routing"] =
        serde_json::json!({"kind": "HTTPRoute", "host": host, "gateway": {"name": "public"}});
    create_clair(&client, &ns, "clair", spec).await?;
    until_available(
        env,
        &client,
        &ns,
        START,
        "clair Available behind an HTTPRoute",
    )
    .await?;
    router
        .serving_http_route(&client, &ns, "clair", Duration::from_secs(60))
        .await?;
    // Quay's 600 s for an index request, on every rule, and the stand-in serves them so.
    let config = router.config()?;
    let server = config
        .split("\n  server {")
        .find(|s| s.contains(&format!("server_name {host};")))
        .with_context(|| format!("no server for {host} in the router's config:\n{config}"))?;
    let timeouts: Vec<&str> = server
        .lines()
        .filter(|l| l.trim_start().starts_with("proxy_read_timeout"))
        .collect();
    ensure!(
        timeouts.len() >= 3
            && timeouts
                .iter()
                .all(|l| l.trim() == "proxy_read_timeout 600s;"),
        "the HTTPRoute's request timeout is not served: {timeouts:?} in\n{server}"
    );

    let token = quay_token(&client, &ns).await?;
    let routed = router.agent(&host, None, Duration::from_secs(30))?;
    let direct = agent_within(Duration::from_secs(30));
    // A path only each service serves: the indexer's state, the matcher's update operations,
    // a notification's page (none: the notifier's own answer).
    for (service, path) in [
        ("clair-indexer", "/indexer/api/v1/index_state"),
        ("clair-matcher", "/matcher/api/v1/internal/update_operation"),
        (
            "clair-notifier",
            "/notifier/api/v1/notification/00000000-0000-0000-0000-000000000000",
        ),
    ] {
        let base = service_url(&client, &ns, service).await?;
        let own = send(
            &direct,
            "GET",
            format!("{base}{path}"),
            Some(token.clone()),
            None,
        )
        .await?;
        let through = send(
            &routed,
            "GET",
            format!("http://{host}{path}"),
            Some(token.clone()),
            None,
        )
        .await?;
        let same = through.status == own.status && through.body == own.body;
        let indexer_state_ok = service != "clair-indexer"
            || (own.status == 200 && through.etag.is_some() && through.etag == own.etag);
        if !same || !indexer_state_ok {
            bail!(
                "{path} through the HTTPRoute answered {} {:?} with ETag {:?}, the Service \
                 {service} {} {:?} with ETag {:?} and headers {:?}; {}",
                through.status,
                through.body,
                through.etag,
                own.status,
                own.body,
                own.etag,
                own.headers,
                behind_service(&client, &ns, service).await
            );
        }
    }
    Ok(())
}
