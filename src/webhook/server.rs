//! The HTTPS admission server. Its certificate is reloaded in place when renewed, so
//! rotation needs no restart and drops no connection.

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use axum_server::tls_rustls::RustlsConfig;
use kube::Client;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use tracing::{debug, warn};

use crate::platform::Platform;
use crate::templating::seal::Seal;

use crate::metrics::Refusal;

use super::limits::Peer;
use super::shares::Shares;

use super::{
    TEMPLATE_CONFIG_PATH, VALIDATE_CONFIG_PATH, VALIDATE_RESOURCE_PATH, resources, templating,
    validate,
};

/// What the handlers share.
#[derive(Clone)]
pub struct Shared {
    pub client: Client,
    /// What tenants may name.
    pub platform: Platform,
    /// The key that seals admitted templates.
    pub seal: Seal,
    /// Where admissions are counted.
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// Whether every caller proved by certificate that it is the apiserver: only then is a
    /// request's body trusted enough to read what it names (`webhook::callers`).
    pub authenticated: bool,
    /// Turns to decide a review: [`CONCURRENT_REVIEWS`], shared fairly among peers.
    pub turns: std::sync::Arc<Shares>,
    /// The bytes of request bodies held at once: [`BODY_BUDGET`], shared fairly among peers.
    pub bytes: std::sync::Arc<Shares>,
    /// The user the operator's own requests are made as ([`own_user`]), when known.
    pub own_user: Option<OwnUser>,
}

impl Shared {
    /// The turns a server's handlers share.
    pub fn turns() -> std::sync::Arc<Shares> {
        Shares::new(CONCURRENT_REVIEWS)
    }

    /// The body bytes a server's handlers share; one peer holds at most half of them.
    pub fn bytes() -> std::sync::Arc<Shares> {
        Shares::capped(BODY_BUDGET, BODY_BUDGET / 2)
    }
}

/// The largest review read. The apiserver takes request bodies of up to 3 MiB, and an
/// update's review holds the object twice (old and new, the old at most etcd's 1.5 MiB):
/// every review it can send fits, so none is answered with a 413 (which a webhook that fails
/// open would let through unchecked).
pub const MAX_REVIEW_BYTES: usize = 6 * 1024 * 1024;

/// The bytes of request bodies the server holds at once, taken by each request's declared
/// length before its body is read: four of the largest reviews, or thousands of the usual
/// few kilobytes.
pub const BODY_BUDGET: usize = 4 * MAX_REVIEW_BYTES;

/// How long a request may take, from its first byte to the answer: the apiserver waits 5 s
/// (10 s for templating) and gives up. A client that sends slowly is cut off here.
const REQUEST_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a connection may take over its TLS handshake, and then over a request's
/// headers.
const HANDSHAKE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// Requests one HTTP/2 connection may have open at once. The apiserver opens more
/// connections when it needs more.
const STREAMS_PER_CONNECTION: u32 = 16;

/// Reviews decided at once (each may make access reviews and reads); the rest wait their
/// turn, the next going to the peer holding fewest. Bodies are read before a turn is taken,
/// so slow senders hold none.
const CONCURRENT_REVIEWS: usize = 16;

/// The routes: one path per webhook, each request held to [`REQUEST_DEADLINE`],
/// [`MAX_REVIEW_BYTES`] and its share of [`BODY_BUDGET`].
pub fn router(shared: Shared) -> Router {
    use axum::middleware::from_fn_with_state;
    Router::new()
        .route(VALIDATE_CONFIG_PATH, post(validate_config))
        .route(TEMPLATE_CONFIG_PATH, post(template_config))
        .route(VALIDATE_RESOURCE_PATH, post(validate_resource))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .layer(from_fn_with_state(shared.clone(), within_budget))
        .layer(from_fn_with_state(shared.clone(), within_deadline))
        .with_state(shared)
}

/// Answers 408 when a request (reading its body included) passes [`REQUEST_DEADLINE`].
async fn within_deadline(
    State(shared): State<Shared>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match tokio::time::timeout(REQUEST_DEADLINE, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            shared.metrics.refused(Refusal::Deadline);
            (
                http::StatusCode::REQUEST_TIMEOUT,
                "the request took longer than 10 s",
            )
                .into_response()
        }
    }
}

/// Takes a request's share of [`BODY_BUDGET`] by the length it declares (the largest review
/// when it declares none) before its body is read, and holds it until it is answered; a
/// declared length over [`MAX_REVIEW_BYTES`] is answered 413 unread.
async fn within_budget(
    State(shared): State<Shared>,
    peer: Peer,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let declared = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|length| length.to_str().ok()?.parse::<u64>().ok());
    let length = match declared {
        Some(length) if length > MAX_REVIEW_BYTES as u64 => {
            shared.metrics.refused(Refusal::Body);
            return (
                http::StatusCode::PAYLOAD_TOO_LARGE,
                "a review is at most 6 MiB",
            )
                .into_response();
        }
        Some(length) => length as usize,
        None => MAX_REVIEW_BYTES,
    };
    let _bytes = shared.bytes.take(peer, length).await;
    next.run(request).await
}

type Review = Json<AdmissionReview<DynamicObject>>;

/// Unwraps the request of a review, answers it with `decide`, and wraps the response; a
/// malformed review is answered as invalid. Counted as `webhook`'s.
async fn answer<F, Fut>(
    review: AdmissionReview<DynamicObject>,
    webhook: &str,
    shared: &Shared,
    peer: Peer,
    decide: F,
) -> Review
where
    F: FnOnce(AdmissionRequest<DynamicObject>) -> Fut,
    Fut: std::future::Future<Output = AdmissionResponse>,
{
    let metrics = &shared.metrics;
    let start = std::time::Instant::now();
    // The deadline bounds the wait.
    let _turn = shared.turns.take(peer, 1).await;
    let request: Result<AdmissionRequest<DynamicObject>, _> = review.try_into();
    let (response, verdict) = match request {
        Ok(request) => {
            let response = decide(request).await;
            let verdict = if response.allowed {
                "allowed"
            } else {
                "denied"
            };
            (response, verdict)
        }
        Err(e) => {
            warn!(error = %e, "malformed AdmissionReview");
            (AdmissionResponse::invalid(e.to_string()), "error")
        }
    };
    metrics.admitted(webhook, verdict, start.elapsed());
    Json(response.into_review())
}

/// The user this process's requests are made as: its name and UID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnUser {
    pub username: String,
    pub uid: Option<String>,
}

impl OwnUser {
    /// Whether a request of `user` is one of this process's (name and UID both: an
    /// identity provider without a prefix could give someone else the same name).
    pub fn wrote(&self, user: &k8s_openapi::api::authentication::v1::UserInfo) -> bool {
        user.username.as_deref() == Some(self.username.as_str()) && user.uid == self.uid
    }
}

/// The user this process's requests are made as (a SelfSubjectReview, tried a few times),
/// so that the webhook can tell the operator's own writes; `None` (and every write
/// reviewed in full) when the apiserver does not say.
pub async fn own_user(client: &Client) -> Option<OwnUser> {
    use backon::{ExponentialBuilder, Retryable};
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api = kube::Api::<SelfSubjectReview>::all(client.clone());
    let review = || async {
        api.create(
            &kube::api::PostParams::default(),
            &SelfSubjectReview::default(),
        )
        .await
    };
    let reviewed = review
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(std::time::Duration::from_millis(500))
                .with_max_times(3),
        )
        .await;
    match reviewed {
        Ok(reviewed) => {
            let user = reviewed.status.and_then(|s| s.user_info)?;
            Some(OwnUser {
                username: user.username?,
                uid: user.uid,
            })
        }
        Err(e) => {
            warn!(error = %e, "cannot learn the operator's own user: its writes are reviewed in full");
            None
        }
    }
}

/// Applies a verdict to a response.
fn conclude(mut response: AdmissionResponse, verdict: validate::Verdict) -> AdmissionResponse {
    if !verdict.warnings.is_empty() {
        response.warnings = Some(verdict.warnings);
    }
    match verdict.denied {
        Some(message) => response.deny(message),
        None => response,
    }
}

async fn validate_config(State(shared): State<Shared>, peer: Peer, Json(review): Review) -> Review {
    answer(review, "config", &shared, peer, |request| async move {
        let response = AdmissionResponse::from(&request);
        let Some(object) = &request.object else {
            return response;
        };
        let verdict = validate::config_object(object, &request.kind.kind);
        debug!(kind = %request.kind.kind, name = %request.name, denied = ?verdict.denied, "config validation");
        conclude(response, verdict)
    })
    .await
}

async fn validate_resource(
    State(shared): State<Shared>,
    peer: Peer,
    Json(review): Review,
) -> Review {
    let Shared {
        client,
        platform,
        authenticated,
        own_user,
        ..
    } = shared.clone();
    answer(review, "resources", &shared, peer, |request| async move {
        let response = AdmissionResponse::from(&request);
        let Some(object) = &request.object else {
            return response;
        };
        let kind = request.kind.kind.as_str();
        let namespace = request.namespace.clone().unwrap_or_default();
        let resource = match resources::Resource::decode(object, kind) {
            Ok(Some(resource)) => resource,
            Ok(None) => return response,
            Err(refusal) => return response.deny(refusal),
        };
        // The operator's own write of what it derived from a resource already checked here
        // (a `Clair`'s services, naming the Secrets the Clair named or the operator made):
        // an access review would only ask whether the operator may read them, and what they
        // hold was checked by the reconcile that wrote them. Only the request is checked.
        // (Trusted only from the apiserver: anyone else could claim the operator's name.)
        if authenticated
            && own_user
                .as_ref()
                .is_some_and(|own| own.wrote(&request.user_info))
        {
            return conclude(
                response,
                resources::check(&resource, &resources::Unread, &platform),
            );
        }
        let sources = resource.sources();
        // The operator will read these with its own access: the writer must be able to.
        let secrets: std::collections::BTreeSet<String> = sources
            .iter()
            .filter_map(|s| s.secret.as_ref().map(|k| k.name.clone()))
            .chain(resource.other_secrets())
            .collect();
        for secret in secrets {
            let user = &request.user_info;
            match crate::sources::may_get(&client, user, &namespace, "secrets", &secret).await {
                Ok(true) => {}
                Ok(false) => {
                    return response.deny(format!(
                        "the {kind} names Secret {secret}, which user {} may not get in \
                         {namespace}: the operator would read it on their behalf",
                        user.username.as_deref().unwrap_or("(unknown)")
                    ));
                }
                Err(e) => {
                    return response.deny(format!("cannot check access to Secret {secret}: {e}"));
                }
            }
        }
        // A caller not known to be the apiserver may have made the namespace up: what the
        // resource names is left unread, and the answer holds only what the request does.
        if !authenticated {
            return conclude(
                response,
                resources::check(&resource, &resources::Unread, &platform),
            );
        }
        let mut fetched = Vec::new();
        let objects = crate::sources::ReadOnce::new(&client);
        for source in sources {
            let found = match crate::sources::read_source(&objects, &namespace, &source).await {
                Ok(Ok(document)) => Ok(document.text),
                Ok(Err(missing)) => Err(missing),
                Err(e) => Err(format!("cannot check: {e}")),
            };
            fetched.push((source, found));
        }
        conclude(
            response,
            resources::check(&resource, &resources::Fetched(fetched), &platform),
        )
    })
    .await
}

async fn template_config(State(shared): State<Shared>, peer: Peer, Json(review): Review) -> Review {
    let state = shared.clone();
    answer(review, "template", &state, peer, |request| async move {
        let response = templating::admit(
            &shared.client,
            &shared.seal,
            &request,
            shared.authenticated,
        )
        .await;
        debug!(kind = %request.kind.kind, name = %request.name, allowed = response.allowed, "templating");
        response
    })
    .await
}

/// Serves `router()` on `listener` (already bound, so the apiserver can be pointed at it
/// as soon as this is called) with `tls` until `shutdown` resolves.
pub async fn serve(
    shared: Shared,
    listener: std::net::TcpListener,
    tls: RustlsConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let handle = axum_server::Handle::new();
    let stopper = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        stopper.graceful_shutdown(Some(std::time::Duration::from_secs(5)));
    });
    listener.set_nonblocking(true)?;
    use super::limits::{Connections, IDLE, Limited, PER_PEER, TOTAL};
    let acceptor = axum_server::tls_rustls::RustlsAcceptor::new(tls)
        .handshake_timeout(HANDSHAKE_DEADLINE)
        .acceptor(Limited::new(
            Connections::new(PER_PEER, TOTAL),
            IDLE,
            shared.metrics.clone(),
        ));
    let mut server = axum_server::from_tcp(listener)?
        .acceptor(acceptor)
        .first_request_timeout(HANDSHAKE_DEADLINE)
        .handle(handle);
    server
        .http_builder()
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HANDSHAKE_DEADLINE);
    // Streams one HTTP/2 connection may have open: what one connection can make the server
    // read at once (hyper's default is 200).
    server
        .http_builder()
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .max_concurrent_streams(STREAMS_PER_CONNECTION);
    server.serve(router(shared).into_make_service()).await
}
