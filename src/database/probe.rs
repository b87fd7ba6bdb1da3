//! A real connection with a service's credentials: the measurement behind `DatabaseReady`
//! for external databases. Bounded by a connect timeout and a few retries of transient
//! failures; what it reports says which part failed and never carries the password.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use rustls::pki_types::CertificateDer;
use tokio_postgres::config::TargetSessionAttrs;
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};

use super::bounded::{Bounded, Framed, Overrun};
use super::connstring::{self, ConnSettings, TlsMode};
use super::tls;
use crate::text;

/// Why a connection check failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The connection string cannot be used as written.
    Misconfigured,
    /// The server refused the credentials.
    AuthFailed,
    /// The server answers but the database does not exist.
    DatabaseMissing,
    /// No server answered (DNS, refused, timeout, TLS).
    Unreachable,
    /// The server answered but takes no connection now (too many clients, starting up or
    /// shutting down): retried, and reported as unreachable if it lasts.
    Busy,
    /// The server answered with another error.
    Rejected,
}

/// A failed check, for a condition message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

/// What a successful check learnt about the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probed {
    /// The server's `max_connections`.
    pub max_connections: Option<u32>,
    /// For a notifier's database (asked with [`ProbeOptions::notifications`]): its
    /// notifications not delivered yet, or why they could not be counted (the connection
    /// check itself succeeded either way). `None` when not asked.
    pub undelivered: Option<Result<Undelivered, String>>,
}

/// The notifier's notifications not delivered yet, from its own `receipt` table (what it
/// means: `machine::notifications`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Undelivered {
    pub count: u64,
    /// The oldest of them (`None` when there is none).
    pub oldest: Option<Oldest>,
}

/// When the oldest undelivered notification was created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Oldest {
    /// Its age by the database's clock (what is judged: no skew with the operator's).
    pub age: Duration,
    /// Its creation time (what the message says: it stays the same from one check to the
    /// next, so a failing Clair's status is not rewritten at every check).
    pub created: k8s_openapi::jiff::Timestamp,
}

/// The notifier's receipts still waiting for a delivery (`created`, or `delivery_failed`
/// should a later Clair set it), the age of the oldest in seconds and its creation time. A
/// `delivery_failed` receipt's `ts` moves at every attempt: its age is its update
/// operation's (when the notifier processed it).
const UNDELIVERED: &str = "SELECT count(*), \
     COALESCE(EXTRACT(EPOCH FROM now() - min(w.since)), 0)::bigint, \
     COALESCE(EXTRACT(EPOCH FROM min(w.since)), 0)::bigint \
     FROM (SELECT CASE WHEN r.status = 'delivery_failed' THEN COALESCE(u.ts, r.ts) \
                       ELSE r.ts END AS since \
           FROM receipt r LEFT JOIN notifier_update_operation u ON u.uo_id = r.uo_id \
           WHERE r.status IN ('created', 'delivery_failed')) w";

/// How long counting may take, apart from the connection check's own deadline: a tenant's
/// huge (or slow) table must not turn a database that answers into an unreachable one.
const COUNT_DEADLINE: Duration = Duration::from_secs(3);

/// Settings of a check.
#[derive(Clone, Copy, Debug)]
pub struct ProbeOptions {
    pub connect_timeout: Duration,
    /// Extra attempts after a transient failure.
    pub retries: usize,
    /// Also count the notifier's undelivered notifications (its database only).
    pub notifications: bool,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            retries: 2,
            notifications: false,
        }
    }
}

/// Connects with `connstring`, asks for `max_connections`, and disconnects.
pub async fn probe(connstring: &str, options: ProbeOptions) -> Result<Probed, Failure> {
    let settings = connstring::parse(connstring).map_err(|e| Failure {
        kind: FailureKind::Misconfigured,
        message: e.to_string(),
    })?;
    probe_settings(&settings, options, &[]).await
}

/// As [`probe`], for a connection string already parsed, trusting `trusted` CAs beside the
/// system's for `sslmode=verify-*`.
pub async fn probe_settings(
    settings: &ConnSettings,
    options: ProbeOptions,
    trusted: &[CertificateDer<'static>],
) -> Result<Probed, Failure> {
    let attempt = || probe_once(settings, options, trusted);
    attempt
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(250))
                .with_max_delay(Duration::from_secs(2))
                .with_max_times(options.retries),
        )
        .when(|failure: &Failure| {
            matches!(failure.kind, FailureKind::Unreachable | FailureKind::Busy)
        })
        .await
}

/// Probes at once, across every resource: an operator starting (or a fleet rechecked at the
/// same moment) would otherwise open a connection per service of every Clair together, and
/// exhaust a shared server's `max_connections`, failing Clairs that are fine.
const CONCURRENT_PROBES: usize = 8;
static PROBES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(CONCURRENT_PROBES);

async fn probe_once(
    settings: &ConnSettings,
    options: ProbeOptions,
    trusted: &[CertificateDer<'static>],
) -> Result<Probed, Failure> {
    let timeout = options.connect_timeout;
    let misconfigured = |message: String| Failure {
        kind: FailureKind::Misconfigured,
        message,
    };
    let mut config = settings
        .to_client_config(timeout)
        .map_err(|e| misconfigured(e.to_string()))?;
    let mode = settings
        .tls_mode()
        .map_err(|e| misconfigured(e.to_string()))?;
    config.ssl_mode(match mode {
        TlsMode::Disable => tokio_postgres::config::SslMode::Disable,
        TlsMode::Allow | TlsMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull => {
            tokio_postgres::config::SslMode::Require
        }
    });
    // Never closed: the error arm is only there so that no path panics.
    let _permit = PROBES.acquire().await.map_err(|_| Failure {
        kind: FailureKind::Busy,
        message: "the operator's probe limiter is closed".to_string(),
    })?;
    let target = settings.describe();
    let password = settings.get("password").unwrap_or_default().to_string();
    let classify = |e: tokio_postgres::Error| classify(&e, &password);
    // The whole exchange is bounded, in time and in bytes, not only the TCP connect.
    let exchange = async {
        let tls = tls::client_config(mode, trusted).map_err(misconfigured)?;
        let client = connect(settings, &config, tls, timeout, &classify).await?;
        let row = client
            .query_one("SELECT current_setting('max_connections')", &[])
            .await
            .map_err(classify)?;
        let max_connections = row.try_get::<_, String>(0).map_err(classify)?.parse().ok();
        let undelivered = match options.notifications {
            true => Some(
                tokio::time::timeout(COUNT_DEADLINE, undelivered(&client))
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "counting them took more than {} s",
                            COUNT_DEADLINE.as_secs()
                        ))
                    }),
            ),
            false => None,
        };
        Ok(Probed {
            max_connections,
            undelivered,
        })
    };
    tokio::time::timeout(timeout * 2, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(Failure {
                kind: FailureKind::Unreachable,
                message: format!("{target}: no answer within {}s", (timeout * 2).as_secs()),
            })
        })
        .map_err(|f| Failure {
            message: text::cut(
                &if f.message.starts_with(&target) {
                    f.message
                } else {
                    format!("{target}: {}", f.message)
                },
                QUOTED_BYTES,
            ),
            ..f
        })
}

/// A client on the first of the settings' hosts that takes the check (and, for
/// `target_session_attrs=read-write`, writes), over a socket of ours bounded in bytes
/// ([`Bounded`]): tokio-postgres' own connect reads whatever length a server declares.
async fn connect(
    settings: &ConnSettings,
    config: &tokio_postgres::Config,
    tls: Option<rustls::ClientConfig>,
    timeout: Duration,
    classify: &impl Fn(tokio_postgres::Error) -> Failure,
) -> Result<tokio_postgres::Client, Failure> {
    let hosts = settings.hosts().map_err(|e| Failure {
        kind: FailureKind::Misconfigured,
        message: e.to_string(),
    })?;
    let mut failure = None;
    for (host, port) in hosts {
        let unreachable = |message: String| Failure {
            kind: FailureKind::Unreachable,
            message: format!("{host}:{port}: {message}"),
        };
        let socket = match tokio::time::timeout(
            timeout,
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await
        {
            Ok(Ok(socket)) => socket,
            Ok(Err(e)) => {
                failure = Some(unreachable(format!("error connecting to server: {e}")));
                continue;
            }
            Err(_) => {
                failure = Some(unreachable("timeout connecting to server".to_string()));
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        let connected = match &tls {
            None => {
                start(
                    config,
                    Bounded::socket(socket, false),
                    tokio_postgres::NoTls,
                )
                .await
            }
            Some(tls) => {
                let mut make = tokio_postgres_rustls::MakeRustlsConnect::new(tls.clone());
                let connector = MakeTlsConnect::<Bounded<tokio::net::TcpStream>>::make_tls_connect(
                    &mut make, &host,
                )
                .map_err(|e| Failure {
                    kind: FailureKind::Misconfigured,
                    message: format!("{host}: {e}"),
                })?;
                start(config, Bounded::socket(socket, true), Framed(connector)).await
            }
        };
        let client = match connected {
            Ok(client) => client,
            Err(e) => {
                failure = Some(classify(e));
                continue;
            }
        };
        if config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite {
            let read_only = client
                .query_one("SHOW transaction_read_only", &[])
                .await
                .map_err(classify)?
                .try_get::<_, String>(0)
                .map_err(classify)?;
            if read_only == "on" {
                failure = Some(Failure {
                    kind: FailureKind::Rejected,
                    message: format!("{host}:{port}: the server is read-only"),
                });
                continue;
            }
        }
        return Ok(client);
    }
    Err(failure.unwrap_or(Failure {
        kind: FailureKind::Misconfigured,
        message: "the connection string names no host".to_string(),
    }))
}

/// The startup exchange over `stream`, the connection then driven in the background.
async fn start<S, T>(
    config: &tokio_postgres::Config,
    stream: S,
    tls: T,
) -> Result<tokio_postgres::Client, tokio_postgres::Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: TlsConnect<S>,
    T::Stream: Send + 'static,
{
    let (client, connection) = config.connect_raw(stream, tls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// The notifier's undelivered notifications, or why they cannot be counted (its tables not
/// there yet, or the query refused: the server's message and code).
async fn undelivered(client: &tokio_postgres::Client) -> Result<Undelivered, String> {
    let refused = |e: tokio_postgres::Error| {
        let why = match e.as_db_error() {
            Some(db) => format!(
                "counting them failed: {} ({})",
                db.message(),
                db.code().code()
            ),
            None => format!("counting them failed: {e}"),
        };
        text::cut(&why, QUOTED_BYTES)
    };
    // The database is the tenant's: whatever its tables hold, nothing here panics (a wrong
    // type is an error), and the server gives up on the count before the deadline here.
    client
        .batch_execute("SET statement_timeout = '2s'")
        .await
        .map_err(refused)?;
    let exists = client
        .query_one(
            "SELECT to_regclass('receipt') IS NOT NULL \
             AND to_regclass('notifier_update_operation') IS NOT NULL",
            &[],
        )
        .await
        .map_err(refused)?
        .try_get::<_, bool>(0)
        .map_err(refused)?;
    if !exists {
        return Err(
            "the notifier's tables are not there yet (its migrations run when it starts)"
                .to_string(),
        );
    }
    let row = client.query_one(UNDELIVERED, &[]).await.map_err(refused)?;
    let number = |index: usize| row.try_get::<_, i64>(index).map_err(refused);
    let count = u64::try_from(number(0)?).unwrap_or(0);
    let age = u64::try_from(number(1)?).unwrap_or(0);
    let created = k8s_openapi::jiff::Timestamp::from_second(number(2)?)
        .map_err(|e| format!("counting them failed: {e}"))?;
    Ok(Undelivered {
        count,
        oldest: (count > 0).then(|| Oldest {
            age: Duration::from_secs(age),
            created,
        }),
    })
}

fn classify(error: &tokio_postgres::Error, password: &str) -> Failure {
    let kind = match error.code() {
        Some(code) if *code == SqlState::INVALID_PASSWORD => FailureKind::AuthFailed,
        Some(code) if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
            FailureKind::AuthFailed
        }
        Some(code) if *code == SqlState::INVALID_CATALOG_NAME => FailureKind::DatabaseMissing,
        Some(code)
            if *code == SqlState::TOO_MANY_CONNECTIONS || *code == SqlState::CANNOT_CONNECT_NOW =>
        {
            FailureKind::Busy
        }
        Some(_) => FailureKind::Rejected,
        // A server that says too much is no unreachable one: not retried.
        None if Overrun::behind(error).is_some() => FailureKind::Rejected,
        None => FailureKind::Unreachable,
    };
    let message = match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            // The chain of causes: "error connecting to server: Connection refused".
            let mut text = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                text.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            text
        }
    };
    Failure {
        kind,
        message: redact(&message, password),
    }
}

/// The longest a server's words are quoted in a failure (and so in a condition, an Event or
/// a log line).
pub const QUOTED_BYTES: usize = 512;

/// `message` without `secret` in it, however the server or a library quoted it.
fn redact(message: &str, secret: &str) -> String {
    if secret.len() < 3 {
        return message.to_string();
    }
    message.replace(secret, "[redacted]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        assert_eq!(
            redact("password hunter2 wrong", "hunter2"),
            "password [redacted] wrong"
        );
    }

    #[tokio::test]
    async fn a_bad_string_fails_without_connecting() {
        let failure = probe("host=h sslmode=maybe user=u", ProbeOptions::default())
            .await
            .unwrap_err();
        assert_eq!(failure.kind, FailureKind::Misconfigured);
        assert!(failure.message.contains("sslmode"));
    }
}
