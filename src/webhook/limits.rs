//! What one caller can hold of the admission server: connections, per peer and in all, and
//! how long a connection may stay open with no request. Anyone who reaches the port can
//! open connections (and hold each through its TLS handshake and first request, both
//! time-limited in `server`); without a bound a pod could hold enough to exhaust the
//! operator's memory or file descriptors, or all of them, so that the apiserver's calls fail
//! (and the resource webhook, which fails open, is skipped). With a bound per peer, the
//! apiserver, which calls from its own addresses, keeps its share.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use axum_server::accept::Accept;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tracing::{debug, warn};

use crate::metrics::{Metrics, Refusal};

/// Connections one peer may hold at once.
pub const PER_PEER: usize = 32;
/// Connections the server holds at once.
pub const TOTAL: usize = 1024;
/// How long a connection may stay open with no request under way. Longer than the
/// apiserver's own idle timeout for its webhook connections (90 s), so that the apiserver
/// closes its idle connections first and never sends a request on one being closed here.
pub const IDLE: Duration = Duration::from_secs(120);

/// Who a connection is from, as the bounds count it: an IPv4 address, or an IPv6 /64 (one
/// host may hold a whole /64). Requests carry it as an extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Peer(pub IpAddr);

impl Peer {
    pub fn of(address: IpAddr) -> Self {
        match address.to_canonical() {
            IpAddr::V6(v6) => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                Self(IpAddr::V6(prefix.into()))
            }
            v4 => Self(v4),
        }
    }

    /// The peer of a request that came some other way than through [`Limited`] (a test's
    /// router): all such requests count as one.
    pub const UNKNOWN: Self = Self(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<Peer>()
            .copied()
            .unwrap_or(Peer::UNKNOWN))
    }
}

/// Open connections, counted per peer.
#[derive(Debug)]
pub struct Connections {
    per_peer: usize,
    total: usize,
    open: Mutex<HashMap<Peer, usize>>,
}

/// One connection's place; given back when the connection (every clone of its service)
/// is gone.
#[derive(Debug)]
pub struct Slot {
    connections: Arc<Connections>,
    peer: Peer,
}

impl Connections {
    pub fn new(per_peer: usize, total: usize) -> Arc<Self> {
        Arc::new(Self {
            per_peer,
            total,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A place for a connection from `peer`, if it is within both bounds.
    pub fn admit(self: &Arc<Self>, peer: Peer) -> Option<Slot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let total: usize = open.values().sum();
        let from_peer = open.get(&peer).copied().unwrap_or(0);
        if total >= self.total || from_peer >= self.per_peer {
            return None;
        }
        open.insert(peer, from_peer + 1);
        Some(Slot {
            connections: self.clone(),
            peer,
        })
    }

    /// Connections open now (for tests and logs).
    pub fn open(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .sum()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self
            .connections
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.peer);
            }
        }
    }
}

/// The acceptor below TLS: refuses a connection over the bounds before its handshake, and
/// closes one that has had no request under way for [`IDLE`].
#[derive(Clone, Debug)]
pub struct Limited {
    pub connections: Arc<Connections>,
    pub idle: Duration,
    pub metrics: Arc<Metrics>,
    /// When a refusal was last logged as a warning (Unix seconds): at most once a minute.
    pub warned: Arc<AtomicI64>,
}

impl Limited {
    pub fn new(connections: Arc<Connections>, idle: Duration, metrics: Arc<Metrics>) -> Self {
        Self {
            connections,
            idle,
            metrics,
            warned: Arc::default(),
        }
    }

    fn refuse(&self, peer: Peer) {
        self.metrics.refused(Refusal::Connections);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let last = self.warned.load(Ordering::Relaxed);
        if now - last >= 60
            && self
                .warned
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            warn!(peer = %peer.0, per_peer = self.connections.per_peer, total = self.connections.total,
                "webhook connections refused over their bounds (counted in webhook_refusals_total; logged at most once a minute)");
        } else {
            debug!(peer = %peer.0, "webhook connection refused over its bounds");
        }
    }
}

/// A connection's service, holding its [`Slot`] for as long as the connection lives, and
/// marking each request on it as under way.
#[derive(Clone, Debug)]
pub struct Held<S> {
    inner: S,
    peer: Peer,
    activity: Arc<Activity>,
    _slot: Arc<Slot>,
}

impl<S> Accept<TcpStream, S> for Limited {
    type Stream = Watched<TcpStream>;
    type Service = Held<S>;
    type Future = std::future::Ready<std::io::Result<(Watched<TcpStream>, Held<S>)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let Ok(address) = stream.peer_addr() else {
            return std::future::ready(Err(std::io::Error::other("a connection with no peer")));
        };
        let peer = Peer::of(address.ip());
        let Some(slot) = self.connections.admit(peer) else {
            self.refuse(peer);
            // Dropping the stream closes the connection.
            return std::future::ready(Err(std::io::Error::other(
                "too many webhook connections from one address, or in all",
            )));
        };
        let activity = Arc::new(Activity::new());
        std::future::ready(Ok((
            Watched::new(stream, activity.clone(), self.idle),
            Held {
                inner: service,
                peer,
                activity,
                _slot: Arc::new(slot),
            },
        )))
    }
}

impl<S, B> tower::Service<http::Request<B>> for Held<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = UnderWay<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.peer);
        UnderWay {
            inner: Box::pin(self.inner.call(request)),
            _busy: Busy::new(self.activity.clone()),
        }
    }
}

/// Whether a connection has requests under way, and since when it has had none.
#[derive(Debug)]
pub struct Activity {
    under_way: AtomicUsize,
    last: Mutex<Instant>,
}

impl Activity {
    fn new() -> Self {
        Self {
            under_way: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
        }
    }

    /// When the connection becomes idle too long, if nothing happens before: `None` while a
    /// request is under way.
    fn idle_until(&self, idle: Duration) -> Option<Instant> {
        if self.under_way.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(*self.last.lock().unwrap_or_else(|e| e.into_inner()) + idle)
    }
}

/// One request under way on a connection, from its call until its response is made.
#[derive(Debug)]
struct Busy(Arc<Activity>);

impl Busy {
    fn new(activity: Arc<Activity>) -> Self {
        activity.under_way.fetch_add(1, Ordering::AcqRel);
        Self(activity)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.last.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.under_way.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request's response future, marking the request under way until it resolves.
pub struct UnderWay<F> {
    inner: Pin<Box<F>>,
    _busy: Busy,
}

impl<F: Future> Future for UnderWay<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.inner.as_mut().poll(cx)
    }
}

/// A connection's stream that ends (as if the peer had closed it) once the connection has
/// had no request under way for its idle deadline. Bytes alone (an HTTP/2 ping, a
/// keep-alive) do not keep it open.
pub struct Watched<T> {
    inner: T,
    activity: Arc<Activity>,
    idle: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl<T> Watched<T> {
    fn new(inner: T, activity: Arc<Activity>, idle: Duration) -> Self {
        Self {
            inner,
            activity,
            idle,
            timer: Box::pin(tokio::time::sleep(idle)),
        }
    }

    /// Whether the idle deadline has passed; otherwise the timer is set to wake this task
    /// when it might.
    fn idle_past(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            let until = match self.activity.idle_until(self.idle) {
                Some(until) if until <= Instant::now() => return true,
                Some(until) => until,
                None => Instant::now() + self.idle,
            };
            self.timer.as_mut().reset(until);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Pending if self.idle_past(cx) => {
                debug!("webhook connection closed: no request for its idle deadline");
                // Nothing read: the end of the stream.
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(address: &str) -> Peer {
        Peer::of(address.parse().unwrap())
    }

    #[test]
    fn one_peer_cannot_take_every_place() {
        let connections = Connections::new(2, 3);
        let attacker = peer("10.244.0.9");
        let apiserver = peer("10.77.0.1");
        let first = connections.admit(attacker).expect("within bounds");
        let _second = connections.admit(attacker).expect("within bounds");
        assert!(
            connections.admit(attacker).is_none(),
            "over the peer's bound"
        );
        let _apiserver = connections.admit(apiserver).expect("another peer's share");
        assert!(
            connections.admit(peer("10.244.0.10")).is_none(),
            "over the total"
        );
        drop(first);
        assert_eq!(connections.open(), 2);
        assert!(connections.admit(attacker).is_some(), "a place given back");
    }

    #[test]
    fn an_ipv6_host_is_one_peer_across_its_64() {
        assert_eq!(peer("2001:db8:1:2::5"), peer("2001:db8:1:2:ffff::9"));
        assert_ne!(peer("2001:db8:1:2::5"), peer("2001:db8:1:3::5"));
        assert_eq!(peer("::ffff:10.0.0.1"), peer("10.0.0.1"));
        assert_ne!(peer("10.0.0.1"), peer("10.0.0.2"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_with_no_request_ends_at_its_idle_deadline() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (ours, mut theirs) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::new());
        let mut watched = Watched::new(ours, activity.clone(), Duration::from_secs(100));
        let started = tokio::time::Instant::now();
        // A request under way keeps it open past the deadline, and bytes alone do not.
        let busy = Busy::new(activity.clone());
        let sender = tokio::spawn(async move {
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_secs(30)).await;
                theirs.write_all(b"ping").await.unwrap();
            }
            theirs
        });
        let mut byte = [0u8; 4];
        for _ in 0..6 {
            assert_eq!(watched.read(&mut byte).await.unwrap(), 4, "a ping is read");
        }
        assert_eq!(started.elapsed(), Duration::from_secs(180));
        drop(busy);
        let mut read = 0;
        loop {
            match watched.read(&mut byte).await.unwrap() {
                0 => break,
                n => read += n,
            }
        }
        assert_eq!(read, 4 * 3, "pings read while idle");
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(280),
            "ended 100 s after the last request, though pings came"
        );
        drop(sender);
    }
}
