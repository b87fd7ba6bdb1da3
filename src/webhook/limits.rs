//! What one caller can hold of the admission server: connections, per peer address and in
//! all. Anyone who reaches the port can open connections (and hold each through its TLS
//! handshake and first request, both time-limited in `server`); without a bound a pod could
//! hold enough to exhaust the operator's memory or file descriptors, or all of them, so that
//! the apiserver's calls fail (and the resource webhook, which fails open, is skipped). With
//! a bound per peer, the apiserver, which calls from its own addresses, keeps its share.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum_server::accept::Accept;
use tokio::net::TcpStream;

/// Connections one peer address may hold at once.
pub const PER_PEER: usize = 64;
/// Connections the server holds at once.
pub const TOTAL: usize = 1024;

/// Open connections, counted per peer address.
#[derive(Debug)]
pub struct Connections {
    per_peer: usize,
    total: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place; given back when the connection (every clone of its service)
/// is gone.
#[derive(Debug)]
pub struct Slot {
    connections: Arc<Connections>,
    peer: IpAddr,
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
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Slot> {
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

/// The acceptor below TLS: refuses a connection over the bounds before its handshake.
#[derive(Clone, Debug)]
pub struct Limited {
    pub connections: Arc<Connections>,
}

/// A connection's service, holding its [`Slot`] for as long as the connection lives.
#[derive(Clone, Debug)]
pub struct Held<S> {
    inner: S,
    _slot: Arc<Slot>,
}

impl<S> Accept<TcpStream, S> for Limited {
    type Stream = TcpStream;
    type Service = Held<S>;
    type Future = std::future::Ready<std::io::Result<(TcpStream, Held<S>)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let slot = stream
            .peer_addr()
            .ok()
            .and_then(|peer| self.connections.admit(peer.ip()));
        std::future::ready(match slot {
            Some(slot) => Ok((
                stream,
                Held {
                    inner: service,
                    _slot: Arc::new(slot),
                },
            )),
            // Dropping the stream closes the connection.
            None => Err(std::io::Error::other(
                "too many webhook connections from one address, or in all",
            )),
        })
    }
}

impl<S, R> tower::Service<R> for Held<S>
where
    S: tower::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_peer_cannot_take_every_place() {
        let connections = Connections::new(2, 3);
        let attacker: IpAddr = "10.244.0.9".parse().unwrap();
        let apiserver: IpAddr = "10.77.0.1".parse().unwrap();
        let first = connections.admit(attacker).expect("within bounds");
        let _second = connections.admit(attacker).expect("within bounds");
        assert!(
            connections.admit(attacker).is_none(),
            "over the peer's bound"
        );
        let _apiserver = connections.admit(apiserver).expect("another peer's share");
        assert!(
            connections.admit("10.244.0.10".parse().unwrap()).is_none(),
            "over the total"
        );
        drop(first);
        assert_eq!(connections.open(), 2);
        assert!(connections.admit(attacker).is_some(), "a place given back");
    }
}
