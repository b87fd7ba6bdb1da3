//! A real connection with a service's credentials: the measurement behind `DatabaseReady`
//! for external databases. Bounded in time (a deadline that starts once the check holds one
//! of the operator's turns), in bytes ([`Bounded`]) and in where it may go ([`Networks`]).
//! What it reports tells a tenant what to fix in their own database (no answer, TLS, login,
//! database, connections) and nothing more: no answer, a refused port, a timeout and a
//! server that is not PostgreSQL read the same, so a check maps no network for its writer;
//! the detail goes to the operator's log. It never carries the password.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use rustls::pki_types::CertificateDer;
use tokio_postgres::config::TargetSessionAttrs;
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};

use super::bounded::{Bounded, Framed};
use super::connstring::{self, ConnSettings, TlsMode};
use super::networks::Networks;
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
    /// No server answered (DNS, refused, timeout, not PostgreSQL), or TLS with it failed.
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
    /// The longest the whole check may take, every host and attempt, once it has its turn.
    pub deadline: Duration,
    /// Extra attempts after a transient failure.
    pub retries: usize,
    /// Also count the notifier's undelivered notifications (its database only).
    pub notifications: bool,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            deadline: Duration::from_secs(30),
            retries: 2,
            notifications: false,
        }
    }
}

/// Connects with `connstring`, asks for `max_connections`, and disconnects.
pub async fn probe(
    connstring: &str,
    options: ProbeOptions,
    networks: &Networks,
) -> Result<Probed, Failure> {
    let settings = connstring::parse(connstring).map_err(|e| Failure {
        kind: FailureKind::Misconfigured,
        message: e.to_string(),
    })?;
    probe_settings(&settings, options, &[], networks).await
}

/// As [`probe`], for a connection string already parsed, trusting `trusted` CAs beside the
/// system's for `sslmode=verify-*`.
pub async fn probe_settings(
    settings: &ConnSettings,
    options: ProbeOptions,
    trusted: &[CertificateDer<'static>],
    networks: &Networks,
) -> Result<Probed, Failure> {
    // The deadline starts with the turn: a healthy database is never reported unanswered
    // because other tenants' checks held the turns. Never closed: the error arm is only
    // there so that no path panics.
    let _turn = PROBES.acquire().await.map_err(|_| Failure {
        kind: FailureKind::Busy,
        message: "the operator's probe limiter is closed".to_string(),
    })?;
    let attempt = || probe_once(settings, options, trusted, networks);
    let attempts = attempt
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(250))
                .with_max_delay(Duration::from_secs(2))
                .with_max_times(options.retries),
        )
        .when(|failure: &Failure| {
            matches!(failure.kind, FailureKind::Unreachable | FailureKind::Busy)
        });
    tokio::time::timeout(options.deadline, attempts)
        .await
        .unwrap_or_else(|_| {
            let target = settings.describe();
            tracing::info!(
                server = %text::cut(&target, QUOTED_BYTES),
                "database check: no answer within {} s",
                options.deadline.as_secs()
            );
            Err(unanswered(&target))
        })
}

/// What a tenant is told when nothing usable answered at `place`: the same words whether
/// the port was closed, the packets dropped, the name unknown or the server no PostgreSQL.
fn unanswered(place: &str) -> Failure {
    Failure {
        kind: FailureKind::Unreachable,
        message: text::cut(&format!("{place}: {NO_ANSWER}"), QUOTED_BYTES),
    }
}

const NO_ANSWER: &str = "no PostgreSQL server answered: check the host and port, and that the \
                         server admits connections from the operator's pods (the operator's \
                         log says more)";

/// Probes at once, across every resource: an operator starting (or a fleet rechecked at the
/// same moment) would otherwise open a connection per service of every Clair together, and
/// exhaust a shared server's `max_connections`, failing Clairs that are fine.
const CONCURRENT_PROBES: usize = 8;
static PROBES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(CONCURRENT_PROBES);

async fn probe_once(
    settings: &ConnSettings,
    options: ProbeOptions,
    trusted: &[CertificateDer<'static>],
    networks: &Networks,
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
    let target = settings.describe();
    let password = settings.get("password").unwrap_or_default().to_string();
    let classify = |e: tokio_postgres::Error| {
        let (failure, detail) = classify(&e, &password);
        log_detail(&target, &failure, &detail);
        failure
    };
    // The whole exchange is bounded, in time and in bytes, not only the TCP connect.
    let exchange = async {
        let tls = tls::client_config(mode, trusted).map_err(misconfigured)?;
        let client = connect(settings, &config, tls, timeout, networks, &classify).await?;
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
            let detail = format!("no answer within {} s", (timeout * 2).as_secs());
            let failure = unanswered(&target);
            log_detail(&target, &failure, &detail);
            Err(failure)
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
/// Only addresses `networks` allows are connected to, as resolved here.
async fn connect(
    settings: &ConnSettings,
    config: &tokio_postgres::Config,
    tls: Option<rustls::ClientConfig>,
    timeout: Duration,
    networks: &Networks,
    classify: &impl Fn(tokio_postgres::Error) -> Failure,
) -> Result<tokio_postgres::Client, Failure> {
    let hosts = settings.hosts().map_err(|e| Failure {
        kind: FailureKind::Misconfigured,
        message: e.to_string(),
    })?;
    let mut failure = None;
    // The condition names the string's target already: a host is named only among several.
    let several = hosts.len() > 1;
    for (host, port) in hosts {
        let place = format!("{host}:{port}");
        let named = if several {
            format!("{place}: ")
        } else {
            String::new()
        };
        let socket = match reach(&host, port, timeout, networks).await {
            Ok(socket) => socket,
            Err(Reach::Refused) => {
                failure = Some(Failure {
                    kind: FailureKind::Misconfigured,
                    message: format!(
                        "{named}the operator does not check databases at this address (its \
                         --database-networks and --database-networks-refused): name a host \
                         in a network the platform team allows, or ask them to allow yours"
                    ),
                });
                continue;
            }
            Err(Reach::Unanswered(detail)) => {
                let unanswered = Failure {
                    kind: FailureKind::Unreachable,
                    message: NO_ANSWER.to_string(),
                };
                log_detail(&place, &unanswered, &detail);
                failure = Some(unanswered);
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
                // Which host did not answer is the log's to say: a tenant reads the same
                // whichever it was.
                let failed = classify(e);
                failure = Some(match failed.kind {
                    FailureKind::Unreachable => failed,
                    _ => Failure {
                        message: format!("{named}{}", failed.message),
                        ..failed
                    },
                });
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
                    message: format!("{named}the server is read-only"),
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

/// Why no socket was opened to a host.
enum Reach {
    /// Every address it resolves to is outside the networks checks may reach.
    Refused,
    /// It resolves to nothing, or nothing accepted the connection in time (the detail, for
    /// the log).
    Unanswered(String),
}

/// A TCP connection to the first of `host`'s addresses that `networks` allows and that
/// accepts it within `timeout` (the name resolved within it too).
async fn reach(
    host: &str,
    port: u16,
    timeout: Duration,
    networks: &Networks,
) -> Result<tokio::net::TcpStream, Reach> {
    let timed_out = || Reach::Unanswered("timeout connecting to server".to_string());
    let addresses: Vec<std::net::SocketAddr> =
        tokio::time::timeout(timeout, tokio::net::lookup_host((host, port)))
            .await
            .map_err(|_| timed_out())?
            .map_err(|e| Reach::Unanswered(format!("error resolving the host: {e}")))?
            .collect();
    let allowed: Vec<_> = addresses
        .iter()
        .filter(|address| networks.allows(address.ip()))
        .collect();
    if allowed.is_empty() {
        return Err(match addresses.is_empty() {
            true => Reach::Unanswered("the host resolves to no address".to_string()),
            false => Reach::Refused,
        });
    }
    let mut why = String::new();
    for address in allowed {
        match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(address)).await {
            Ok(Ok(socket)) => return Ok(socket),
            Ok(Err(e)) => why = format!("error connecting to {address}: {e}"),
            Err(_) => why = format!("timeout connecting to {address}"),
        }
    }
    Err(Reach::Unanswered(why))
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

/// What a tenant is told of `error` (by its kind: what to fix, never the server's own
/// words), and the detail for the operator's log, both without the password.
fn classify(error: &tokio_postgres::Error, password: &str) -> (Failure, String) {
    let detail = match error.as_db_error() {
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
    let detail = redact(&detail, password);
    let said = |kind, what: &str| {
        let code = error.code().map_or("", |code| code.code());
        let failure = Failure {
            kind,
            message: format!("{what} (SQLSTATE {code})"),
        };
        (failure, detail.clone())
    };
    let code = error.code();
    if code == Some(&SqlState::INVALID_PASSWORD)
        || code == Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION)
    {
        return said(
            FailureKind::AuthFailed,
            "the server refused the login: check the user and password, and that the \
             server's pg_hba.conf admits this user from the operator's pods",
        );
    }
    if code == Some(&SqlState::INVALID_CATALOG_NAME) {
        return said(
            FailureKind::DatabaseMissing,
            "the database does not exist on the server: create it, or name another",
        );
    }
    if code == Some(&SqlState::TOO_MANY_CONNECTIONS) || code == Some(&SqlState::CANNOT_CONNECT_NOW)
    {
        return said(
            FailureKind::Busy,
            "the server takes no new connection now (too many clients, or starting or \
             stopping): raise its max_connections, or lower the pools using it",
        );
    }
    if code.is_some() {
        return said(
            FailureKind::Rejected,
            "the server refused the connection or the check's query",
        );
    }
    // Only a server that asked for TLS (or a PostgreSQL that refused it) gets this far: a
    // closed port, a silent one and one that is no PostgreSQL read the same, below.
    if error
        .to_string()
        .starts_with("error performing TLS handshake")
    {
        let failure = Failure {
            kind: FailureKind::Unreachable,
            message: "TLS with the server failed: its certificate is not one the sslmode \
                      trusts or not for this host, or it takes no TLS (the operator's log \
                      says which)"
                .to_string(),
        };
        return (failure, detail);
    }
    let failure = Failure {
        kind: FailureKind::Unreachable,
        message: NO_ANSWER.to_string(),
    };
    (failure, detail)
}

/// The detail of a failed check, for the operator's log (bounded, as a condition is).
fn log_detail(target: &str, failure: &Failure, detail: &str) {
    tracing::info!(
        server = %text::cut(target, QUOTED_BYTES),
        detail = %text::cut(detail, QUOTED_BYTES),
        kind = ?failure.kind,
        "database check failed"
    );
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
        let failure = probe(
            "host=h sslmode=maybe user=u",
            ProbeOptions::default(),
            &Networks::default(),
        )
        .await
        .unwrap_err();
        assert_eq!(failure.kind, FailureKind::Misconfigured);
        assert!(failure.message.contains("sslmode"));
    }

    /// A loopback listener answering each connection as `answer` says, for a while.
    async fn listener(answer: &'static [u8], close: bool) -> u16 {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            for _ in 0..8 {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let _ = socket.write_all(answer).await;
                    if !close {
                        tokio::time::sleep(Duration::from_secs(10)).await;
                    }
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn closed_silent_and_foreign_servers_read_the_same() {
        let options = ProbeOptions {
            connect_timeout: Duration::from_millis(500),
            retries: 0,
            ..ProbeOptions::default()
        };
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let silent = listener(b"", false).await;
        let http = listener(b"HTTP/1.1 400 Bad Request\r\nServer: nginx\r\n\r\n", true).await;
        // An ErrorResponse declaring 2 GiB (issue 54).
        let huge = listener(b"NE\x7f\xff\xff\xff", false).await;
        let mut seen = Vec::new();
        for port in [closed, silent, http, huge] {
            let string = format!("host=127.0.0.1 port={port} user=u password=pw dbname=d");
            let failure = probe(&string, options, &Networks::any()).await.unwrap_err();
            assert_eq!(
                failure.kind,
                FailureKind::Unreachable,
                "{port}: {failure:?}"
            );
            seen.push(failure.message.replace(&port.to_string(), "PORT"));
        }
        assert!(seen.iter().all(|m| *m == seen[0]), "{seen:#?}");
        assert!(
            seen[0].contains("no PostgreSQL server answered"),
            "{}",
            seen[0]
        );
    }

    #[tokio::test]
    async fn a_refused_network_is_never_dialled() {
        let port = listener(b"N", true).await;
        let string = format!("host=localhost,127.0.0.1 port={port} user=u dbname=d");
        let failure = probe(&string, ProbeOptions::default(), &Networks::default())
            .await
            .unwrap_err();
        assert_eq!(failure.kind, FailureKind::Misconfigured, "{failure:?}");
        assert!(
            failure.message.contains("--database-networks"),
            "{}",
            failure.message
        );
    }

    #[tokio::test]
    async fn a_host_is_named_once_and_only_among_several() {
        let port = listener(b"N", true).await;
        let one = format!("host=127.0.0.1 port={port} user=u dbname=d");
        let failure = probe(&one, ProbeOptions::default(), &Networks::default())
            .await
            .unwrap_err();
        let place = format!("127.0.0.1:{port}");
        assert_eq!(
            failure.message.matches(&place).count(),
            1,
            "{}",
            failure.message
        );
        let several = format!("host=127.0.0.2,127.0.0.1 port={port} user=u dbname=d");
        let failure = probe(&several, ProbeOptions::default(), &Networks::default())
            .await
            .unwrap_err();
        assert!(
            failure
                .message
                .contains(&format!("127.0.0.1:{port}: the operator does not")),
            "the host that failed last is named: {}",
            failure.message
        );
    }

    #[tokio::test]
    async fn a_check_waiting_for_its_turn_is_not_timed_out_by_the_wait() {
        // A server that refuses the login, as PostgreSQL says it: 'N' to the SSL request,
        // then an ErrorResponse with SQLSTATE 28P01.
        let mut refusal = b"N".to_vec();
        let fields = b"SFATAL\0C28P01\0Mpassword authentication failed\0\0";
        refusal.push(b'E');
        refusal.extend_from_slice(&(fields.len() as u32 + 4).to_be_bytes());
        refusal.extend_from_slice(fields);
        let refusal: &'static [u8] = Box::leak(refusal.into_boxed_slice());
        let port = listener(refusal, false).await;
        let options = ProbeOptions {
            connect_timeout: Duration::from_millis(500),
            deadline: Duration::from_secs(1),
            retries: 0,
            ..ProbeOptions::default()
        };
        // Every turn held for longer than the check's deadline.
        let held = PROBES.acquire_many(CONCURRENT_PROBES as u32).await.unwrap();
        let string =
            format!("host=127.0.0.1 port={port} user=u password=pw dbname=d sslmode=prefer");
        let check = tokio::spawn(async move { probe(&string, options, &Networks::any()).await });
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(held);
        let failure = check.await.unwrap().unwrap_err();
        assert_eq!(failure.kind, FailureKind::AuthFailed, "{failure:?}");
    }
}
