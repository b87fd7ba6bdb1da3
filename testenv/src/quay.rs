//! Quay's side of Clair's notifications, no more and no less (`../shared/notes/quay.md`,
//! from Quay's `endpoints/secscan.py` and its notification worker): `POST
//! /secscan/notification` refuses a delivery without a Bearer HS256 token signed with the
//! pre-shared key that carries `nbf`, `iat` and `exp` (401), refuses a body without
//! `notification_id` and `callback` (400), and answers 200. The worker then ignores the
//! callback, pages the notification through the endpoint Quay was given (signing as Quay
//! does: `iss: quay`, `exp` five minutes ahead, nothing else), keeps the entries whose reason
//! is `added`, and deletes the notification after its last page.
//!
//! The tokens are HMAC-SHA256 over base64url, done here with `hmac` and `sha2`: the JWT
//! crates bring RSA and elliptic-curve code this HS256-only check never uses.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

/// Quay's page size when it reads a notification.
const PAGE_SIZE: usize = 500;
/// At most this many pages per notification (a bound on a test's requests).
const MAX_PAGES: usize = 100;

/// One entry Quay acted on: a manifest newly affected by a vulnerability.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Added {
    pub notification: String,
    pub manifest: String,
    pub vulnerability: String,
}

/// What the receiver saw.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// Deliveries answered 200, by notification id, in order.
    pub delivered: Vec<String>,
    /// Deliveries refused, each with its status and why.
    pub refused: Vec<(u16, String)>,
    /// The `added` entries of every notification paged to its end.
    pub added: Vec<Added>,
    /// Notifications deleted after their last page.
    pub deleted: Vec<String>,
    /// What went wrong while paging (a page refused, a delete refused).
    pub errors: Vec<String>,
}

/// Quay's two settings for Clair.
struct Settings {
    key: Vec<u8>,
    endpoint: String,
}

struct Inner {
    settings: Mutex<Settings>,
    /// How the worker reaches the endpoint.
    agent: ureq::Agent,
    seen: Mutex<Seen>,
}

impl Inner {
    fn settings(&self) -> (Vec<u8>, String) {
        let settings = self.settings.lock().unwrap_or_else(|e| e.into_inner());
        (settings.key.clone(), settings.endpoint.clone())
    }
}

fn settings(psk_base64: &str, endpoint: &str) -> Result<Settings, String> {
    let key = STANDARD
        .decode(psk_base64.trim())
        .map_err(|e| format!("SECURITY_SCANNER_V4_PSK is not base64: {e}"))?;
    Ok(Settings {
        key,
        endpoint: endpoint.trim_end_matches('/').to_string(),
    })
}

/// A Quay's notification endpoint and worker, listening on `bind`.
pub struct QuayReceiver {
    address: SocketAddr,
    inner: Arc<Inner>,
}

impl QuayReceiver {
    /// Listens on `bind` (the node's address, for Clair's pods; loopback in unit tests), with
    /// Quay's `SECURITY_SCANNER_V4_PSK` and `SECURITY_SCANNER_V4_ENDPOINT`.
    pub async fn start(bind: SocketAddr, psk_base64: &str, endpoint: &str) -> Result<Self, String> {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(std::time::Duration::from_secs(30)))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Self::start_with(bind, psk_base64, endpoint, agent).await
    }

    /// As [`QuayReceiver::start`], the worker's requests sent by `agent` (one that resolves
    /// the endpoint's host to the ingress stand-in and trusts its certificate; it must
    /// return answers of any status).
    pub async fn start_with(
        bind: SocketAddr,
        psk_base64: &str,
        endpoint: &str,
        agent: ureq::Agent,
    ) -> Result<Self, String> {
        let inner = Arc::new(Inner {
            settings: Mutex::new(settings(psk_base64, endpoint)?),
            agent,
            seen: Mutex::default(),
        });
        let app = Router::new()
            .route("/secscan/notification", post(deliver))
            .with_state(Arc::clone(&inner));
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|e| format!("listen on {bind}: {e}"))?;
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { address, inner })
    }

    /// Quay's base URL, as `spec.quay.url` names it.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Quay reconfigured: a new key and endpoint, for the deliveries and pages from now on.
    pub fn configure(&self, psk_base64: &str, endpoint: &str) -> Result<(), String> {
        let next = settings(psk_base64, endpoint)?;
        *self
            .inner
            .settings
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = next;
        Ok(())
    }

    /// What it saw so far.
    pub fn seen(&self) -> Seen {
        lock(&self.inner.seen).clone()
    }
}

fn lock(seen: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(|e| e.into_inner())
}

async fn deliver(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    let refuse = |status: StatusCode, why: String| {
        lock(&inner.seen)
            .refused
            .push((status.as_u16(), why.clone()));
        (status, why)
    };
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let Some(token) = token else {
        return refuse(StatusCode::UNAUTHORIZED, "no Bearer token".to_string());
    };
    if let Err(why) = verify(token, &inner.settings().0, &["nbf", "iat", "exp"]) {
        return refuse(StatusCode::UNAUTHORIZED, why);
    }
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let (Some(id), Some(_callback)) = (body["notification_id"].as_str(), body["callback"].as_str())
    else {
        return refuse(
            StatusCode::BAD_REQUEST,
            format!("the body lacks notification_id or callback: {body}"),
        );
    };
    let id = id.to_string();
    lock(&inner.seen).delivered.push(id.clone());
    // Quay queues the notification and answers; its worker pages it later.
    let worker = Arc::clone(&inner);
    tokio::task::spawn_blocking(move || work(&worker, &id));
    (StatusCode::OK, String::new())
}

/// Quay's worker: every page through the endpoint, the `added` entries kept, then a delete.
fn work(inner: &Inner, id: &str) {
    let (key, endpoint) = inner.settings();
    let base = format!("{endpoint}/notifier/api/v1/notification/{id}");
    let mut added = Vec::new();
    let mut next: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut url = format!("{base}?page_size={PAGE_SIZE}");
        if let Some(next) = &next {
            url.push_str(&format!("&next={next}"));
        }
        let page = match call(&inner.agent, "GET", &url, &key) {
            Ok(page) => page,
            Err(e) => {
                lock(&inner.seen).errors.push(e);
                return;
            }
        };
        for entry in page["notifications"].as_array().into_iter().flatten() {
            if entry["reason"] == "added" {
                added.push(Added {
                    notification: id.to_string(),
                    manifest: entry["manifest"].as_str().unwrap_or_default().to_string(),
                    vulnerability: entry["vulnerability"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                });
            }
        }
        next = page["page"]["next"]
            .as_str()
            .filter(|n| !n.is_empty() && *n != "-1")
            .map(str::to_string);
        if next.is_none() {
            let deleted = call(&inner.agent, "DELETE", &base, &key);
            let mut seen = lock(&inner.seen);
            seen.added.extend(added);
            match deleted {
                Ok(_) => seen.deleted.push(id.to_string()),
                Err(e) => seen.errors.push(e),
            }
            return;
        }
    }
    lock(&inner.seen)
        .errors
        .push(format!("{id}: more than {MAX_PAGES} pages"));
}

/// One request to Clair signed as Quay signs; the JSON answer (`null` for an empty body).
fn call(agent: &ureq::Agent, method: &str, url: &str, key: &[u8]) -> Result<Value, String> {
    let token = quay_token(key).map_err(|e| format!("{method} {url}: {e}"))?;
    let authorization = format!("Bearer {token}");
    let response = match method {
        "DELETE" => agent
            .delete(url)
            .header("authorization", &authorization)
            .call(),
        _ => agent
            .get(url)
            .header("authorization", &authorization)
            .call(),
    };
    let mut response = response.map_err(|e| format!("{method} {url}: {e}"))?;
    let status = response.status().as_u16();
    let text = response
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("{method} {url}: {e}"))?;
    if status != 200 {
        return Err(format!("{method} {url}: {status} {text}"));
    }
    Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// An HS256 JWT of `claims`, signed with `key`.
pub(crate) fn sign(key: &[u8], claims: &Value) -> Result<String, String> {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
    let mut mac = Hmac::<Sha256>::new_from_slice(key).map_err(|e| e.to_string())?;
    mac.update(format!("{header}.{claims}").as_bytes());
    let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    Ok(format!("{header}.{claims}.{signature}"))
}

/// Quay's token for Clair (`util/secscan/v4/api.py`): `iss: quay`, `exp` five minutes
/// ahead, no `aud`, `nbf` or `iat`.
pub fn quay_token(key: &[u8]) -> Result<String, String> {
    sign(key, &json!({"iss": "quay", "exp": now() + 300}))
}

/// Checks an HS256 token signed with `key` that holds every claim of `required`, within its
/// `nbf` and `exp` (Quay's leeway: none beyond a second's rounding). The claims, or why not.
pub fn verify(token: &str, key: &[u8], required: &[&str]) -> Result<Value, String> {
    let mut parts = token.split('.');
    let (Some(header), Some(claims), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("not a JWT of three parts".to_string());
    };
    let decode = |part: &str, what: &str| {
        URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|e| format!("the {what} is not base64url: {e}"))
    };
    let header: Value = serde_json::from_slice(&decode(header, "header")?)
        .map_err(|e| format!("the header is not JSON: {e}"))?;
    if header["alg"] != "HS256" {
        return Err(format!("alg {} is not HS256", header["alg"]));
    }
    let signed = &token.as_bytes()[..token.len() - signature.len() - 1];
    let mut mac = Hmac::<Sha256>::new_from_slice(key).map_err(|e| e.to_string())?;
    mac.update(signed);
    mac.verify_slice(&decode(signature, "signature")?)
        .map_err(|_| "the signature is not the pre-shared key's".to_string())?;
    let claims: Value = serde_json::from_slice(&decode(claims, "claims")?)
        .map_err(|e| format!("the claims are not JSON: {e}"))?;
    for claim in required {
        if claims[*claim].as_u64().is_none() {
            return Err(format!("the token has no {claim}"));
        }
    }
    let now = now();
    if claims["exp"].as_u64().is_some_and(|exp| exp < now) {
        return Err("the token has expired".to_string());
    }
    if claims["nbf"].as_u64().is_some_and(|nbf| nbf > now + 1) {
        return Err("the token is not valid yet".to_string());
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    use axum::extract::{Path, Query};
    use axum::routing::get;
    use std::collections::HashMap;

    const PSK: &str = "dGhlIHRlc3QncyBwcmUtc2hhcmVkIGtleSwgMzIgYnl0ZXM=";

    /// What the fake notifier was asked, and the key it checks tokens with.
    type ClairState = (Arc<Mutex<Vec<String>>>, Vec<u8>);

    fn key() -> Vec<u8> {
        STANDARD.decode(PSK).unwrap()
    }

    /// Clair's notifier's token: `iss: clair-notifier`, `iat`, `nbf` a minute back, `exp` a
    /// minute ahead.
    fn notifier_token(key: &[u8]) -> String {
        let now = now();
        sign(
            key,
            &json!({"iss": "clair-notifier", "iat": now, "nbf": now - 60, "exp": now + 60}),
        )
        .unwrap()
    }

    /// A notifier's API with one notification of two pages; what it was asked, and the
    /// claims of each request's token (verified with the key: Quay's must pass).
    async fn clair(key: Vec<u8>) -> (String, Arc<Mutex<Vec<String>>>) {
        let asked: Arc<Mutex<Vec<String>>> = Arc::default();
        let state = (Arc::clone(&asked), key);
        let page = |State((asked, key)): State<ClairState>,
                    headers: HeaderMap,
                    Path(id): Path<String>,
                    Query(query): Query<HashMap<String, String>>| async move {
            let token = headers["authorization"]
                .to_str()
                .unwrap()
                .strip_prefix("Bearer ")
                .unwrap();
            let claims = verify(token, &key, &["exp"]).unwrap();
            assert_eq!(claims, json!({"iss": "quay", "exp": claims["exp"]}));
            asked
                .lock()
                .unwrap()
                .push(format!("GET {id} next={:?}", query.get("next")));
            let entry = |manifest: &str, reason: &str, name: &str| json!({"id": "e", "manifest": manifest, "reason": reason, "vulnerability": {"name": name}});
            axum::Json(match query.get("next") {
                None => json!({"page": {"size": 2, "next": "second"},
                    "notifications": [entry("sha256:a", "added", "CVE-1"), entry("sha256:b", "removed", "CVE-2")]}),
                Some(_) => json!({"page": {"size": 1},
                    "notifications": [entry("sha256:c", "added", "CVE-3")]}),
            })
        };
        let delete = |State((asked, _)): State<ClairState>, Path(id): Path<String>| async move {
            asked.lock().unwrap().push(format!("DELETE {id}"));
            StatusCode::OK
        };
        let app = Router::new()
            .route(
                "/notifier/api/v1/notification/{id}",
                get(page).delete(delete),
            )
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, asked)
    }

    async fn post(url: &str, token: Option<String>, body: Value) -> u16 {
        let url = format!("{url}/secscan/notification");
        tokio::task::spawn_blocking(move || {
            let agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build()
                .new_agent();
            let mut request = agent.post(&url);
            if let Some(token) = token {
                request = request.header("authorization", &format!("Bearer {token}"));
            }
            request.send(body.to_string()).unwrap().status().as_u16()
        })
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn a_delivery_is_verified_paged_through_the_endpoint_and_deleted() {
        let (endpoint, asked) = clair(key()).await;
        let receiver = QuayReceiver::start("127.0.0.1:0".parse().unwrap(), PSK, &endpoint)
            .await
            .unwrap();
        let url = receiver.url();
        let body = json!({"notification_id": "n1", "callback": "http://clair/notifier/api/v1/notification/n1"});

        // Refused: no token, another key, a token without nbf and iat (Quay's own kind), a
        // body without its callback.
        assert_eq!(post(&url, None, body.clone()).await, 401);
        assert_eq!(
            post(&url, Some(notifier_token(b"another key")), body.clone()).await,
            401
        );
        assert_eq!(
            post(&url, Some(quay_token(&key()).unwrap()), body.clone()).await,
            401
        );
        assert_eq!(
            post(
                &url,
                Some(notifier_token(&key())),
                json!({"notification_id": "n1"})
            )
            .await,
            400
        );
        assert_eq!(
            receiver.seen().refused.len(),
            4,
            "{:?}",
            receiver.seen().refused
        );
        assert!(
            asked.lock().unwrap().is_empty(),
            "nothing paged for a refused delivery"
        );

        assert_eq!(post(&url, Some(notifier_token(&key())), body).await, 200);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while receiver.seen().deleted.is_empty() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let seen = receiver.seen();
        assert!(seen.errors.is_empty(), "{:?}", seen.errors);
        assert_eq!(seen.delivered, ["n1"]);
        assert_eq!(seen.deleted, ["n1"]);
        let added: Vec<(&str, &str)> = seen
            .added
            .iter()
            .map(|a| (a.manifest.as_str(), a.vulnerability.as_str()))
            .collect();
        assert_eq!(added, [("sha256:a", "CVE-1"), ("sha256:c", "CVE-3")]);
        assert_eq!(
            *asked.lock().unwrap(),
            [
                "GET n1 next=None".to_string(),
                "GET n1 next=Some(\"second\")".to_string(),
                "DELETE n1".to_string()
            ]
        );
    }

    #[test]
    fn an_expired_or_early_token_is_refused() {
        let now = now();
        let expired = sign(
            &key(),
            &json!({"iat": now - 120, "nbf": now - 120, "exp": now - 60}),
        )
        .unwrap();
        assert!(
            verify(&expired, &key(), &["exp"])
                .unwrap_err()
                .contains("expired")
        );
        let early = sign(
            &key(),
            &json!({"iat": now, "nbf": now + 60, "exp": now + 120}),
        )
        .unwrap();
        assert!(
            verify(&early, &key(), &["nbf"])
                .unwrap_err()
                .contains("not valid yet")
        );
        let tampered = notifier_token(&key()).replacen('.', ".e30", 1);
        assert!(verify(&tampered, &key(), &[]).is_err());
    }
}
