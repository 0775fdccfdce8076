//! The admin API's open connections, and which one to close when a new one arrives at
//! the cap ([`super::MAX_CONNECTIONS`]).
//!
//! A connection that has not completed a request head is what a slow or stalled
//! client (slowloris) holds: at the cap, the oldest of those is closed first, then the
//! oldest idle keep-alive connection (between two requests); a connection with a
//! request being answered is never closed for room. So a real request is answered at
//! once under any number of half-sent ones, instead of waiting in the accept queue for
//! their header timeouts. Per-peer limits would not do it: an operator's `mongoose
//! status` and a stalled client on the same host (the loopback default) are one peer.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

/// One open connection, as the accept loop and its service see it.
#[derive(Debug, Default)]
pub(super) struct Connection {
    /// Request heads it completed (its service was called).
    requests: AtomicU64,
    /// Requests being answered now.
    in_flight: AtomicUsize,
    /// Closed for room: its task drops it.
    evicted: AtomicBool,
    /// Wakes its task to close it.
    close: Notify,
}

impl Connection {
    /// Resolves once the connection was chosen to be closed for room.
    pub(super) async fn evicted(&self) {
        self.close.notified().await;
    }
}

/// Every open connection by accept order (the oldest first).
#[derive(Debug, Default)]
pub(super) struct Connections {
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, Arc<Connection>>>,
}

/// Removes its connection from [`Connections`] when its task ends.
pub(super) struct Registered {
    connections: Arc<Connections>,
    id: u64,
    /// The connection.
    pub(super) connection: Arc<Connection>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.connections.open.lock().remove(&self.id);
    }
}

impl Connections {
    /// Registers a newly accepted connection.
    pub(super) fn register(self: &Arc<Self>) -> Registered {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let connection = Arc::new(Connection::default());
        self.open.lock().insert(id, Arc::clone(&connection));
        Registered {
            connections: Arc::clone(self),
            id,
            connection,
        }
    }

    /// Chooses a connection to close for room and tells its task: the oldest that has
    /// not completed a request head, else the oldest idle between requests. False when
    /// every open connection is answering a request (the new one waits for one to end).
    pub(super) fn evict_one(&self) -> bool {
        let open = self.open.lock();
        let idle = |connection: &&Arc<Connection>| {
            !connection.evicted.load(Ordering::Acquire)
                && connection.in_flight.load(Ordering::Acquire) == 0
        };
        let victim = open
            .values()
            .filter(idle)
            .find(|connection| connection.requests.load(Ordering::Acquire) == 0)
            .or_else(|| open.values().find(idle));
        match victim {
            Some(connection) => {
                connection.evicted.store(true, Ordering::Release);
                connection.close.notify_one();
                true
            }
            None => false,
        }
    }
}

/// A hyper service that counts its connection's requests (a request head completed
/// when hyper calls it) and those being answered.
pub(super) struct Tracked<S> {
    pub(super) inner: S,
    pub(super) connection: Arc<Connection>,
}

/// Counts a request as answered when dropped.
struct Answering(Arc<Connection>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<S, R> hyper::service::Service<R> for Tracked<S>
where
    S: hyper::service::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn call(&self, request: R) -> Self::Future {
        self.connection.requests.fetch_add(1, Ordering::AcqRel);
        self.connection.in_flight.fetch_add(1, Ordering::AcqRel);
        let answering = Answering(Arc::clone(&self.connection));
        let future = self.inner.call(request);
        Box::pin(async move {
            let _answering = answering;
            future.await
        })
    }
}
