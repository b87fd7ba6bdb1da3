//! Who may scrape `/metrics`: a caller whose bearer token the apiserver authenticates
//! (TokenReview) and whose user it authorizes to `get` the non-resource URL `/metrics`
//! (SubjectAccessReview), as controller-runtime's secure metrics serving does. A verdict is
//! kept by the token's digest (a grant for a minute, a refusal for ten seconds), at most
//! [`CACHED`] of them, and at most [`REVIEWS`] reviews run at once: a flood of made-up
//! tokens costs the apiserver a bounded number of requests in flight, and Prometheus's
//! scrapes cost it two requests a minute.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use http::HeaderMap;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// The path and verb a scraper must be allowed (`nonResourceURLs: [/metrics]`, `get`).
pub const PATH: &str = "/metrics";
pub const VERB: &str = "get";
/// Verdicts kept at once.
pub const CACHED: usize = 1024;
/// Reviews (a TokenReview and its SubjectAccessReview) under way at once.
pub const REVIEWS: usize = 4;
/// How long a scrape waits for a review's turn before it is told to come back.
const TURN_WAIT: Duration = Duration::from_secs(5);
/// A service account token is about a kilobyte; a longer header is refused unreviewed.
const LONGEST_TOKEN: usize = 8 * 1024;
const GRANT_KEPT: Duration = Duration::from_secs(60);
const REFUSAL_KEPT: Duration = Duration::from_secs(10);

/// What the apiserver said of a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// No token, or one the apiserver does not authenticate: 401.
    Unauthenticated,
    /// A user who may not `get /metrics`: 403.
    Forbidden,
}

/// Why a scrape was not answered with the metrics, as counted in
/// `metrics_scrape_refusals_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "lowercase")]
pub enum Refused {
    Unauthenticated,
    Forbidden,
    /// Reviews were all under way for [`TURN_WAIT`], or the apiserver did not answer: 503.
    Unavailable,
}

impl Verdict {
    fn kept(self) -> Duration {
        match self {
            Self::Allowed => GRANT_KEPT,
            Self::Unauthenticated | Self::Forbidden => REFUSAL_KEPT,
        }
    }
}

/// Verdicts by token digest, each until it expires, at most `capacity`. Pure: takes the time.
#[derive(Debug)]
pub struct Verdicts {
    capacity: usize,
    kept: HashMap<[u8; 32], (Verdict, Instant)>,
}

impl Verdicts {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            kept: HashMap::new(),
        }
    }

    /// The verdict on `token` while it has not expired at `now`.
    pub fn get(&self, token: &[u8; 32], now: Instant) -> Option<Verdict> {
        self.kept
            .get(token)
            .filter(|(_, until)| *until > now)
            .map(|(verdict, _)| *verdict)
    }

    /// Keeps `verdict` on `token` from `now`; when full, the expired go first, then the one
    /// closest to expiring.
    pub fn put(&mut self, token: [u8; 32], verdict: Verdict, now: Instant) {
        if self.kept.len() >= self.capacity && !self.kept.contains_key(&token) {
            self.kept.retain(|_, (_, until)| *until > now);
            if self.kept.len() >= self.capacity {
                let soonest = self
                    .kept
                    .iter()
                    .min_by_key(|(_, (_, until))| *until)
                    .map(|(key, _)| *key);
                if let Some(key) = soonest {
                    self.kept.remove(&key);
                }
            }
        }
        self.kept.insert(token, (verdict, now + verdict.kept()));
    }

    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }
}

/// The bearer token of an `Authorization` header, if it has one of a sane length.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && token.len() <= LONGEST_TOKEN)
        .then_some(token)
}

/// The apiserver's reviews of scrapers, with their verdicts kept.
pub struct Access {
    client: Client,
    verdicts: Mutex<Verdicts>,
    turns: tokio::sync::Semaphore,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access").finish_non_exhaustive()
    }
}

impl Access {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            verdicts: Mutex::new(Verdicts::new(CACHED)),
            turns: tokio::sync::Semaphore::new(REVIEWS),
        }
    }

    /// Whether the caller that sent `headers` may read the metrics.
    pub async fn check(&self, headers: &HeaderMap) -> Result<(), Refused> {
        let Some(token) = bearer(headers) else {
            return Err(Refused::Unauthenticated);
        };
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let kept = |verdicts: &Mutex<Verdicts>| {
            verdicts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&digest, Instant::now())
        };
        let verdict = match kept(&self.verdicts) {
            Some(verdict) => verdict,
            None => {
                let _turn = tokio::time::timeout(TURN_WAIT, self.turns.acquire())
                    .await
                    .map_err(|_| Refused::Unavailable)?
                    .map_err(|_| Refused::Unavailable)?;
                // Another scrape with the same token may have been reviewed meanwhile.
                match kept(&self.verdicts) {
                    Some(verdict) => verdict,
                    None => {
                        let verdict = self.review(token).await.map_err(|e| {
                            tracing::warn!(error = %e, "cannot review a metrics scraper's token");
                            Refused::Unavailable
                        })?;
                        self.verdicts.lock().unwrap_or_else(|e| e.into_inner()).put(
                            digest,
                            verdict,
                            Instant::now(),
                        );
                        verdict
                    }
                }
            }
        };
        match verdict {
            Verdict::Allowed => Ok(()),
            Verdict::Unauthenticated => Err(Refused::Unauthenticated),
            Verdict::Forbidden => Err(Refused::Forbidden),
        }
    }

    /// A TokenReview of `token`, then a SubjectAccessReview of its user for `get /metrics`.
    async fn review(&self, token: &str) -> Result<Verdict, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let Some(user) = reviewed
            .status
            .filter(|s| s.authenticated == Some(true))
            .and_then(|s| s.user)
        else {
            return Ok(Verdict::Unauthenticated);
        };
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(PATH.to_string()),
                    verb: Some(VERB.to_string()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviewed = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await?;
        Ok(if reviewed.status.is_some_and(|s| s.allowed) {
            Verdict::Allowed
        } else {
            Verdict::Forbidden
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> [u8; 32] {
        [n; 32]
    }

    #[test]
    fn a_grant_is_kept_a_minute_and_a_refusal_ten_seconds() {
        let start = Instant::now();
        let mut verdicts = Verdicts::new(8);
        verdicts.put(key(1), Verdict::Allowed, start);
        verdicts.put(key(2), Verdict::Forbidden, start);
        let at = |s| start + Duration::from_secs(s);
        assert_eq!(verdicts.get(&key(1), at(59)), Some(Verdict::Allowed));
        assert_eq!(verdicts.get(&key(1), at(60)), None);
        assert_eq!(verdicts.get(&key(2), at(9)), Some(Verdict::Forbidden));
        assert_eq!(verdicts.get(&key(2), at(10)), None);
        assert_eq!(verdicts.get(&key(3), start), None);
    }

    #[test]
    fn a_full_cache_drops_the_expired_then_the_soonest_to_expire() {
        let start = Instant::now();
        let mut verdicts = Verdicts::new(2);
        verdicts.put(key(1), Verdict::Forbidden, start);
        verdicts.put(key(2), Verdict::Allowed, start);
        // Full: the refusal (expiring first) goes, the grant stays.
        verdicts.put(key(3), Verdict::Allowed, start);
        assert_eq!(verdicts.len(), 2);
        assert_eq!(verdicts.get(&key(1), start), None);
        assert_eq!(verdicts.get(&key(2), start), Some(Verdict::Allowed));
        // Past the grants' minute, both expired ones go and the new one is kept.
        let later = start + Duration::from_secs(61);
        verdicts.put(key(4), Verdict::Forbidden, later);
        assert_eq!(verdicts.len(), 1);
        assert_eq!(verdicts.get(&key(4), later), Some(Verdict::Forbidden));
        // A verdict replaced in a full cache drops nothing else.
        verdicts.put(key(5), Verdict::Allowed, later);
        verdicts.put(key(5), Verdict::Forbidden, later);
        assert_eq!(verdicts.len(), 2);
        assert_eq!(verdicts.get(&key(4), later), Some(Verdict::Forbidden));
    }

    #[test]
    fn only_a_bearer_token_of_a_sane_length_is_taken() {
        let headers = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(http::header::AUTHORIZATION, value.parse().unwrap());
            headers
        };
        assert_eq!(bearer(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&headers("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(&headers("Basic abc")), None);
        assert_eq!(bearer(&headers("Bearer ")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
        let long = format!("Bearer {}", "a".repeat(LONGEST_TOKEN + 1));
        assert_eq!(bearer(&headers(&long)), None);
        let longest = format!("Bearer {}", "a".repeat(LONGEST_TOKEN));
        assert!(bearer(&headers(&longest)).is_some());
    }
}
