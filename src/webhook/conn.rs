//! Bounds on client connections, so that no client can exhaust the
//! server: at most [`Limits::max_connections`] open at once (one more is
//! closed as soon as it is accepted), a deadline from accept — TLS
//! handshake included — to the first request ([`Limits::first_request`]),
//! and one from the end of a connection's last request to its next
//! ([`Limits::idle`]). A connection past its deadline is closed; one with
//! a request in flight never is (its body read has its own limit).
//!
//! The acceptor ([`Guard`]) sits under TLS: it wraps each accepted TCP
//! stream ([`Guarded`]), which enforces the deadlines on its reads, and the
//! connection's service ([`Tracked`]), which tells the stream when
//! requests start and end. Both share one [`ConnState`].

use std::future::{ready, Future, Ready};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use super::metrics::{Closed, Metrics};

/// How many connections may be open and how long one may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; one more is closed as soon as it is
    /// accepted.
    pub max_connections: usize,
    /// From accept (TLS handshake included) to the first request.
    pub first_request: Duration,
    /// From the end of a connection's last request to its next.
    pub idle: Duration,
}

impl Limits {
    /// The defaults: 1024 connections, 10 s to the first request, 120 s
    /// idle — longer than the 90 s after which the API server's own client
    /// drops an idle connection, so that in the usual case the client
    /// closes first and no request races the close.
    pub(crate) const DEFAULT: Limits = Limits {
        max_connections: 1024,
        first_request: Duration::from_secs(10),
        idle: Duration::from_secs(120),
    };
}

/// The acceptor: applies [`Limits`] to every connection (and sets
/// `TCP_NODELAY`).
#[derive(Clone)]
pub(crate) struct Guard {
    limits: Limits,
    permits: Arc<Semaphore>,
    metrics: Metrics,
    /// When a refusal was last logged (refusals come in floods).
    last_refusal_log: Arc<Mutex<Option<Instant>>>,
}

impl Guard {
    pub(crate) fn new(limits: Limits, metrics: Metrics) -> Self {
        Self {
            limits,
            permits: Arc::new(Semaphore::new(limits.max_connections)),
            metrics,
            last_refusal_log: Arc::new(Mutex::new(None)),
        }
    }

    fn refuse(&self) -> io::Error {
        self.metrics.connection_closed(Closed::Limit);
        let mut last = self
            .last_refusal_log
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if last.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(10)) {
            *last = Some(now);
            tracing::warn!(
                max_connections = self.limits.max_connections,
                "connection limit reached: new connections are closed at once (logged at most every 10 s; counted in dljob_webhook_connections_closed_total)"
            );
        }
        io::Error::other("connection limit reached")
    }
}

impl<S> axum_server::accept::Accept<TcpStream, S> for Guard {
    type Stream = Guarded<TcpStream>;
    type Service = Tracked<S>;
    type Future = Ready<io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        // An error drops the stream: the connection is closed at once.
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            return ready(Err(self.refuse()));
        };
        if let Err(e) = stream.set_nodelay(true) {
            return ready(Err(e));
        }
        let state = Arc::new(ConnState::new());
        self.metrics.connection_opened();
        let first = Instant::now() + self.limits.first_request;
        ready(Ok((
            Guarded {
                io: stream,
                state: state.clone(),
                limits: self.limits,
                timer: Box::pin(tokio::time::sleep_until(first)),
                metrics: self.metrics.clone(),
                _permit: permit,
            },
            Tracked {
                inner: service,
                state,
            },
        )))
    }
}

/// What a connection's stream and service share.
pub(crate) struct ConnState {
    /// When the connection was accepted.
    opened: Instant,
    /// Requests being served.
    in_flight: AtomicUsize,
    /// Requests started so far.
    started: AtomicU64,
    /// Milliseconds from `opened` to the end of the last request.
    last_end_ms: AtomicU64,
    /// The stream's reader, woken when the last request in flight ends so
    /// that the idle deadline is armed.
    reader: AtomicWaker,
}

impl ConnState {
    fn new() -> Self {
        Self {
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            last_end_ms: AtomicU64::new(0),
            reader: AtomicWaker::new(),
        }
    }

    /// When the connection is to be closed unless a request comes, and why;
    /// None while a request is in flight.
    fn deadline(&self, limits: &Limits) -> Option<(Instant, Closed)> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        if self.started.load(Ordering::SeqCst) == 0 {
            return Some((self.opened + limits.first_request, Closed::FirstRequest));
        }
        let end = self.opened + Duration::from_millis(self.last_end_ms.load(Ordering::SeqCst));
        Some((end + limits.idle, Closed::Idle))
    }

    fn request_started(&self) {
        self.started.fetch_add(1, Ordering::SeqCst);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
    }

    fn request_ended(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_end_ms.fetch_max(ms, Ordering::SeqCst);
        if self.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.reader.wake();
        }
    }
}

/// An accepted stream that fails its reads once the connection is past its
/// deadline with no request in flight: hyper then closes it. Holds the
/// connection's permit until it is dropped.
pub(crate) struct Guarded<IO> {
    io: IO,
    state: Arc<ConnState>,
    limits: Limits,
    timer: Pin<Box<Sleep>>,
    metrics: Metrics,
    _permit: OwnedSemaphorePermit,
}

impl<IO> Drop for Guarded<IO> {
    fn drop(&mut self) {
        self.metrics.connection_dropped();
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Poll::Ready(r) = Pin::new(&mut this.io).poll_read(cx, buf) {
            return Poll::Ready(r);
        }
        this.state.reader.register(cx.waker());
        let Some((deadline, why)) = this.state.deadline(&this.limits) else {
            return Poll::Pending;
        };
        if this.timer.deadline() != deadline {
            this.timer.as_mut().reset(deadline);
        }
        match this.timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                this.metrics.connection_closed(why);
                tracing::debug!(
                    reason = why.as_str(),
                    "closing a connection past its deadline"
                );
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    match why {
                        Closed::FirstRequest => "no request within the first-request timeout",
                        _ => "idle past the idle timeout",
                    },
                )))
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A connection's service that marks each request in flight while it is
/// served.
#[derive(Clone)]
pub(crate) struct Tracked<S> {
    inner: S,
    state: Arc<ConnState>,
}

impl<S, R> tower_service::Service<R> for Tracked<S>
where
    S: tower_service::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.state.request_started();
        TrackedFuture {
            inner: self.inner.call(request),
            _in_flight: InFlight(self.state.clone()),
        }
    }
}

/// Ends its request when dropped: answered, failed or cancelled.
struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

pin_project! {
    /// A request's future, in flight until it completes or is dropped.
    pub(crate) struct TrackedFuture<F> {
        #[pin]
        inner: F,
        _in_flight: InFlight,
    }
}

impl<F: Future> Future for TrackedFuture<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().inner.poll(cx)
    }
}
