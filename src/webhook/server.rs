//! The HTTPS admission server. Its certificate is reloaded in place when renewed, so
//! rotation needs no restart and drops no connection.

use std::net::SocketAddr;

use axum::routing::post;
use axum::{Json, Router};
use axum_server::tls_rustls::RustlsConfig;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use tracing::{debug, warn};

use axum::extract::State;
use kube::Client;

use super::{
    TEMPLATE_CONFIG_PATH, VALIDATE_CONFIG_PATH, VALIDATE_RESOURCE_PATH, resources, templating,
    validate,
};
use crate::controller::observe;

/// The routes: one path per webhook.
pub fn router(client: Client) -> Router {
    Router::new()
        .route(VALIDATE_CONFIG_PATH, post(validate_config))
        .route(TEMPLATE_CONFIG_PATH, post(template_config))
        .route(VALIDATE_RESOURCE_PATH, post(validate_resource))
        .with_state(client)
}

async fn validate_resource(
    State(client): State<Client>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(request) => request,
        Err(e) => return Json(AdmissionResponse::invalid(e.to_string()).into_review()),
    };
    let mut response = AdmissionResponse::from(&request);
    if let Some(object) = &request.object {
        let kind = request.kind.kind.as_str();
        let namespace = request.namespace.clone().unwrap_or_default();
        let mut fetched = Vec::new();
        for source in resources::sources(object, kind) {
            let text = observe::read_source(&client, &namespace, &source).await;
            let found = match text {
                Ok(Ok(document)) => Ok(document.text),
                Ok(Err(missing)) => Err(missing),
                Err(e) => Err(format!("cannot check: {e}")),
            };
            fetched.push((source, found));
        }
        let verdict = resources::check(object, kind, &resources::Fetched(fetched));
        if !verdict.warnings.is_empty() {
            response.warnings = Some(verdict.warnings);
        }
        if let Some(message) = verdict.denied {
            response = response.deny(message);
        }
    }
    Json(response.into_review())
}

async fn template_config(
    State(client): State<Client>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(request) => request,
        Err(e) => {
            warn!(error = %e, "malformed AdmissionReview");
            return Json(AdmissionResponse::invalid(e.to_string()).into_review());
        }
    };
    let response = templating::admit(&client, &request).await;
    debug!(kind = %request.kind.kind, name = %request.name, allowed = response.allowed, "templating");
    Json(response.into_review())
}

async fn validate_config(
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(request) => request,
        Err(e) => {
            warn!(error = %e, "malformed AdmissionReview");
            return Json(AdmissionResponse::invalid(e.to_string()).into_review());
        }
    };
    let mut response = AdmissionResponse::from(&request);
    if let Some(object) = &request.object {
        let verdict = validate::config_object(object, &request.kind.kind);
        debug!(kind = %request.kind.kind, name = %request.name, denied = ?verdict.denied, "config validation");
        if !verdict.warnings.is_empty() {
            response.warnings = Some(verdict.warnings);
        }
        if let Some(message) = verdict.denied {
            response = response.deny(message);
        }
    }
    Json(response.into_review())
}

/// Serves `router()` on `addr` with `tls` until `shutdown` resolves.
pub async fn serve(
    client: Client,
    addr: SocketAddr,
    tls: RustlsConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let handle = axum_server::Handle::new();
    let stopper = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        stopper.graceful_shutdown(Some(std::time::Duration::from_secs(5)));
    });
    axum_server::bind_rustls(addr, tls)
        .handle(handle)
        .serve(router(client).into_make_service())
        .await
}
