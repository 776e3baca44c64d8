//! Bounds on client connections, so that no client can exhaust the
//! server or hold it hostage. Every second a connection holds has a
//! deadline, checked on its reads and its writes alike:
//!
//! - from accept (TLS handshake included) to the first request
//!   ([`Limits::first_request`]), and from the last byte of its last
//!   answer to its next request ([`Limits::idle`]);
//! - an answer not taken whole by the client within the stall bound (the
//!   read timeout): a client that never reads, or that opens no HTTP/2
//!   window, keeps nothing past it;
//! - writes that make no progress for the stall bound: a client that
//!   stops reading while dljob answers (or acknowledges its PINGs) is
//!   closed, whatever was being written.
//!
//! A connection past a deadline fails every read and write from then on,
//! so hyper drops it and its slot, its streams and their room are freed.
//! One refused more than [`REFUSALS_PER_SECOND`] times a second has its
//! reads paused until it is back within that rate.
//!
//! At most [`Limits::max_connections`] are open at once ([`Registry`]). At
//! the cap, a new connection takes the place of the one that has waited
//! longest on its client (idle since its last answer, or stalled on an
//! unread answer, a blocked write or a body that does not come) — of
//! those whose client never took a review's answer whole first; only when
//! every connection is busy on dljob's side is the new one closed. The
//! same eviction frees a shared budget that a newer request needs
//! ([`super::budget`]).
//!
//! The acceptor ([`Guard`]) sits under TLS: it wraps each accepted TCP
//! stream ([`Guarded`]), and the connection's service ([`Tracked`]), which
//! tells the stream when requests start and when their answers have been
//! sent, and hands each request its [`Conn`]. They share one
//! [`ConnState`].

use std::collections::HashMap;
use std::future::{ready, Future, Ready};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::metrics::{Closed, Metrics};

/// How many connections may be open and how long one may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once. At the cap a new connection replaces the
    /// one waiting longest on its client; it is closed only when none is.
    pub max_connections: usize,
    /// From accept (TLS handshake included) to the first request.
    pub first_request: Duration,
    /// From the last byte of a connection's last answer to its next
    /// request.
    pub idle: Duration,
}

impl Limits {
    /// The defaults: 192 connections (what each can make dljob hold, at
    /// most, times this, with every budget, fits half the shipped memory
    /// limit: see SECURITY.md), 10 s to the first request, 120 s idle — longer than
    /// the 90 s after which the API server's own client drops an idle
    /// connection, so that in the usual case the client closes first and
    /// no request races the close.
    pub(crate) const DEFAULT: Limits = Limits {
        max_connections: 192,
        first_request: Duration::from_secs(10),
        idle: Duration::from_secs(120),
    };
}

/// The kernel's send buffer of each accepted socket. Left to autotuning,
/// a client that does not read has the kernel hold up to several MiB of
/// dljob's writes per connection before a write blocks; at 256 KiB a
/// stalled writer is seen (and its deadline started) early, and the
/// kernel's share per connection is bounded. A 0.7 MiB answer still
/// leaves in three round trips.
const SEND_BUFFER: usize = 256 * 1024;

/// What a connection can hold of a shared budget ([`super::budget`]):
/// counted per connection, for its share and for eviction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resource {
    /// Reviews in flight (read, computed or being answered).
    Requests,
    /// Request bytes of bodies of at most 256 KiB.
    SmallBodies,
    /// Request bytes of bigger bodies.
    BigBodies,
    /// Answer bytes not yet taken by the client.
    Answers,
    /// Turns at the one review of a big body computed at a time.
    Heavy,
}

impl Resource {
    const COUNT: usize = 5;

    fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Requests => "requests",
            Self::SmallBodies => "small_body_bytes",
            Self::BigBodies => "big_body_bytes",
            Self::Answers => "answer_bytes",
            Self::Heavy => "big_review_turns",
        }
    }
}

/// The open connections, for the cap and for eviction.
pub(crate) struct Registry {
    cap: usize,
    /// How long a connection must have waited on its client to be evicted
    /// for a budget (the connection cap evicts any that waits).
    stall_floor: Duration,
    open: Mutex<HashMap<u64, Arc<ConnState>>>,
    next_id: AtomicU64,
    metrics: Metrics,
}

/// How long a connection must have been waiting on its client before a
/// newer request may evict it for room in a budget: longer than the
/// pauses between the chunks of a body sent at network speed (the one
/// waiting longest goes first, so a body still coming is rarely it).
pub(crate) const EVICT_AFTER: Duration = Duration::from_millis(50);

impl Registry {
    fn new(cap: usize, metrics: Metrics) -> Self {
        Self {
            cap,
            stall_floor: EVICT_AFTER,
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            metrics,
        }
    }

    /// A registry of `cap` connections, for unit tests.
    #[cfg(test)]
    pub(crate) fn for_test(cap: usize) -> Arc<Self> {
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        Arc::new(Self::new(cap, metrics))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Arc<ConnState>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a new connection, evicting the one waiting longest on its
    /// client when at the cap; None when every connection is busy.
    fn admit(&self) -> Option<Arc<ConnState>> {
        let mut open = self.lock();
        if open.len() >= self.cap {
            let now = Instant::now();
            let victim = pick(&open, now, Duration::ZERO, |_| true)?;
            let gone = open.remove(&victim).expect("picked from the map");
            gone.doom(Closed::Evicted, &self.metrics);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState::new(id));
        open.insert(id, state.clone());
        Some(state)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Evicts the connection that has waited longest on its client (at
    /// least [`EVICT_AFTER`]) among those holding some of `resource` not yet
    /// handed to another, other than `except`; the one evicted.
    pub(crate) fn evict_holder(&self, resource: Resource, except: u64) -> Option<Arc<ConnState>> {
        let mut open = self.lock();
        let now = Instant::now();
        let victim = pick(&open, now, self.stall_floor, |c| {
            c.id != except && c.claimable(resource) > 0
        })?;
        let gone = open.remove(&victim).expect("picked from the map");
        drop(open);
        tracing::debug!(
            resource = resource.as_str(),
            "evicting the connection that waited longest on its client, for room a newer request needs"
        );
        gone.doom(Closed::Evicted, &self.metrics);
        Some(gone)
    }
}

/// The connection among `open` that `may` allow and that has waited on its
/// client longest, at least `floor` — of those whose client never took a
/// review's answer whole first (as every hostage-taker's), then of the
/// others.
fn pick(
    open: &HashMap<u64, Arc<ConnState>>,
    now: Instant,
    floor: Duration,
    may: impl Fn(&ConnState) -> bool,
) -> Option<u64> {
    open.values()
        .filter(|c| may(c))
        .filter_map(|c| c.waiting_since().map(|t| ((c.has_answered(), t), c.id)))
        .filter(|((_, t), _)| now.saturating_duration_since(*t) >= floor)
        .min()
        .map(|(_, id)| id)
}

/// The acceptor: applies [`Limits`] to every connection (and sets
/// `TCP_NODELAY` and the send buffer).
#[derive(Clone)]
pub(crate) struct Guard {
    limits: Limits,
    stall: Duration,
    registry: Arc<Registry>,
    metrics: Metrics,
    /// When a refusal was last logged (refusals come in floods).
    last_refusal_log: Arc<Mutex<Option<Instant>>>,
}

impl Guard {
    /// `stall`: how long an answer may wait to be taken, and a write to
    /// make progress.
    pub(crate) fn new(limits: Limits, stall: Duration, metrics: Metrics) -> Self {
        Self {
            limits,
            stall,
            registry: Arc::new(Registry::new(limits.max_connections, metrics.clone())),
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
                "connection limit reached and every connection busy: new connections are closed at once (logged at most every 10 s; counted in dljob_webhook_connections_closed_total)"
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
        let Some(state) = self.registry.admit() else {
            return ready(Err(self.refuse()));
        };
        let registered = Registered {
            state: state.clone(),
            registry: self.registry.clone(),
        };
        if let Err(e) = stream.set_nodelay(true) {
            return ready(Err(e));
        }
        let _ = socket_send_buffer(&stream, SEND_BUFFER);
        self.metrics.connection_opened();
        let first = Instant::now() + self.limits.first_request;
        ready(Ok((
            Guarded {
                io: stream,
                state: state.clone(),
                limits: self.limits,
                stall: self.stall,
                timer: Box::pin(tokio::time::sleep_until(first)),
                metrics: self.metrics.clone(),
                _registered: registered,
            },
            Tracked {
                inner: service,
                conn: Conn {
                    state,
                    registry: self.registry.clone(),
                },
            },
        )))
    }
}

/// Sets `SO_SNDBUF`.
fn socket_send_buffer(stream: &TcpStream, bytes: usize) -> io::Result<()> {
    socket2::SockRef::from(stream).set_send_buffer_size(bytes)
}

/// Removes the connection from the registry when its stream is dropped.
struct Registered {
    state: Arc<ConnState>,
    registry: Arc<Registry>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.remove(self.state.id);
    }
}

/// What a connection's stream, service and requests share.
pub(crate) struct ConnState {
    id: u64,
    /// When the connection was accepted.
    opened: Instant,
    inner: Mutex<Activity>,
    /// Of each [`Resource`], how much this connection's requests hold.
    held: [AtomicUsize; Resource::COUNT],
    /// Of what it holds, how much was handed to requests it was evicted
    /// for: forgotten, not given back, as its rooms go.
    owed: [AtomicUsize; Resource::COUNT],
    /// Whether a review's answer on it has gone out whole: only then may
    /// its requests evict others for room (a client that has never read an
    /// answer cannot take what others hold).
    answered: std::sync::atomic::AtomicBool,
    /// The connection's task, woken when a deadline may have moved or the
    /// connection was evicted.
    task: AtomicWaker,
}

/// What a connection is doing, for its deadlines and for eviction.
struct Activity {
    /// Requests from their start until their answer is sent (or dropped).
    in_flight: usize,
    /// Requests started so far.
    started: u64,
    /// Accept, or when the last answer was sent.
    last_done: Instant,
    /// Answers being sent, and since when: each must be taken whole
    /// within the stall bound.
    answers: Vec<(u64, Instant)>,
    /// Requests waiting on their body: since the last bytes came.
    reading: Vec<(u64, Instant)>,
    /// Since when a write has been blocked.
    write_blocked: Option<Instant>,
    /// Past a deadline or evicted: every read and write fails.
    doomed: Option<Closed>,
    next_seq: u64,
    /// Refusals the connection may still get before its reads pause (a
    /// bucket of [`REFUSALS_PER_SECOND`]), and when it was last filled.
    refusals: f64,
    refusals_filled: Instant,
}

/// Requests a connection may have refused a second (and in a burst)
/// before its reads pause until it is back within the rate: a client that
/// answers a 503 by asking again at once is slowed to this, and the
/// refusals it costs with it. The API server is refused only when the
/// webhook is short of room, and then this is the back-off it needs.
pub(crate) const REFUSALS_PER_SECOND: f64 = 16.0;

impl ConnState {
    fn new(id: u64) -> Self {
        let now = Instant::now();
        Self {
            id,
            opened: now,
            inner: Mutex::new(Activity {
                in_flight: 0,
                started: 0,
                last_done: now,
                answers: Vec::new(),
                reading: Vec::new(),
                write_blocked: None,
                doomed: None,
                next_seq: 0,
                refusals: REFUSALS_PER_SECOND,
                refusals_filled: now,
            }),
            held: Default::default(),
            owed: Default::default(),
            answered: std::sync::atomic::AtomicBool::new(false),
            task: AtomicWaker::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Activity> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn holds(&self, r: Resource) -> usize {
        self.held[r.index()].load(Ordering::Relaxed)
    }

    pub(crate) fn add_held(&self, r: Resource, n: usize) -> usize {
        self.held[r.index()].fetch_add(n, Ordering::Relaxed) + n
    }

    pub(crate) fn sub_held(&self, r: Resource, n: usize) {
        self.held[r.index()].fetch_sub(n, Ordering::Relaxed);
    }

    /// Of what it holds of `r` and does not owe yet, up to `want`, now
    /// owed to an evicting request: how much.
    pub(crate) fn claim(&self, r: Resource, want: usize) -> usize {
        let owed = &self.owed[r.index()];
        let mut now = owed.load(Ordering::Relaxed);
        loop {
            let take = self.holds(r).saturating_sub(now).min(want);
            match owed.compare_exchange(now, now + take, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return take,
                Err(seen) => now = seen,
            }
        }
    }

    /// `n` of its room of `r` goes: how much of it was owed (and is
    /// forgotten rather than given back).
    pub(crate) fn settle(&self, r: Resource, n: usize) -> usize {
        let owed = &self.owed[r.index()];
        let mut now = owed.load(Ordering::Relaxed);
        loop {
            let pay = now.min(n);
            match owed.compare_exchange(now, now - pay, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return pay,
                Err(seen) => now = seen,
            }
        }
    }

    /// What it holds of `r` not yet owed to anyone.
    fn claimable(&self, r: Resource) -> usize {
        self.holds(r)
            .saturating_sub(self.owed[r.index()].load(Ordering::Relaxed))
    }

    /// Marks the connection closed for `why` (counted once) and wakes its
    /// task, whose next read or write fails.
    pub(crate) fn doom(&self, why: Closed, metrics: &Metrics) {
        let first = {
            let mut a = self.lock();
            let first = a.doomed.is_none();
            a.doomed.get_or_insert(why);
            first
        };
        if first {
            metrics.connection_closed(why);
            tracing::debug!(reason = why.as_str(), "closing a connection");
        }
        self.task.wake();
    }

    fn doomed(&self) -> Option<Closed> {
        self.lock().doomed
    }

    /// When the connection is to be closed, and why: the earliest of its
    /// deadlines that applies now.
    fn deadline(&self, limits: &Limits, stall: Duration) -> Option<(Instant, Closed)> {
        let a = self.lock();
        let mut next: Option<(Instant, Closed)> = None;
        let mut consider = |at: Instant, why: Closed| {
            if next.is_none_or(|(t, _)| at < t) {
                next = Some((at, why));
            }
        };
        if let Some(t) = a.write_blocked {
            consider(t + stall, Closed::WriteStalled);
        }
        if let Some(t) = a.answers.iter().map(|(_, t)| *t).min() {
            consider(t + stall, Closed::AnswerUnread);
        }
        if a.in_flight == 0 {
            if a.started == 0 {
                consider(self.opened + limits.first_request, Closed::FirstRequest);
            } else {
                consider(a.last_done + limits.idle, Closed::Idle);
            }
        }
        next
    }

    /// Since when the connection has been waiting on its client: idle, an
    /// answer not taken, a blocked write or a body that does not come
    /// (the earliest). None while only dljob's own work is under way.
    fn waiting_since(&self) -> Option<Instant> {
        let a = self.lock();
        let idle = (a.in_flight == 0).then_some(a.last_done);
        [
            idle,
            a.write_blocked,
            a.answers.iter().map(|(_, t)| *t).min(),
            a.reading.iter().map(|(_, t)| *t).min(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn request_started(&self) {
        let mut a = self.lock();
        a.started += 1;
        a.in_flight += 1;
    }

    /// A request ends: its answer sent, or the request dropped.
    fn request_ended(&self, answer: Option<u64>) {
        {
            let mut a = self.lock();
            if let Some(seq) = answer {
                a.answers.retain(|(s, _)| *s != seq);
            }
            a.in_flight -= 1;
            a.last_done = a.last_done.max(Instant::now());
        }
        self.task.wake();
    }

    fn answer_started(&self) -> u64 {
        let seq = {
            let mut a = self.lock();
            let seq = a.next_seq;
            a.next_seq += 1;
            a.answers.push((seq, Instant::now()));
            seq
        };
        // A new deadline: the task re-arms its timer.
        self.task.wake();
        seq
    }

    fn reading_started(&self) -> u64 {
        let mut a = self.lock();
        let seq = a.next_seq;
        a.next_seq += 1;
        a.reading.push((seq, Instant::now()));
        seq
    }

    fn reading_progress(&self, seq: u64) {
        let mut a = self.lock();
        match a.reading.iter_mut().find(|(s, _)| *s == seq) {
            Some(e) => e.1 = Instant::now(),
            None => a.reading.push((seq, Instant::now())),
        }
    }

    fn reading_ended(&self, seq: u64) {
        self.lock().reading.retain(|(s, _)| *s != seq);
    }

    /// A review's answer went out whole.
    pub(crate) fn answered_whole(&self) {
        self.answered.store(true, Ordering::Relaxed);
    }

    /// Whether a review's answer has gone out whole on it.
    pub(crate) fn has_answered(&self) -> bool {
        self.answered.load(Ordering::Relaxed)
    }

    /// A request of the connection was refused.
    pub(crate) fn refused(&self) {
        let mut a = self.lock();
        let now = Instant::now();
        a.refill_refusals(now);
        a.refusals -= 1.0;
    }

    /// Until when the connection's reads pause (over its refusal rate).
    fn paused_until(&self) -> Option<Instant> {
        let mut a = self.lock();
        let now = Instant::now();
        a.refill_refusals(now);
        (a.refusals < 0.0).then(|| now + Duration::from_secs_f64(-a.refusals / REFUSALS_PER_SECOND))
    }

    fn write_blocked(&self) {
        let mut a = self.lock();
        if a.write_blocked.is_none() {
            a.write_blocked = Some(Instant::now());
        }
    }

    fn wrote(&self) {
        let mut a = self.lock();
        a.write_blocked = None;
    }
}

impl Activity {
    fn refill_refusals(&mut self, now: Instant) {
        let more = now
            .saturating_duration_since(self.refusals_filled)
            .as_secs_f64()
            * REFUSALS_PER_SECOND;
        self.refusals = (self.refusals + more).min(REFUSALS_PER_SECOND);
        self.refusals_filled = now;
    }
}

/// A request's view of its connection: for its share of the budgets and
/// for the eviction of others (in the request's extensions).
#[derive(Clone)]
pub(crate) struct Conn {
    pub(crate) state: Arc<ConnState>,
    pub(crate) registry: Arc<Registry>,
}

impl Conn {
    /// A connection of its own registry, for unit tests.
    #[cfg(test)]
    pub(crate) fn for_test() -> Self {
        Self::admitted(&Registry::for_test(1))
    }

    /// A new connection of `registry`, for unit tests.
    #[cfg(test)]
    pub(crate) fn admitted(registry: &Arc<Registry>) -> Self {
        Self {
            state: registry.admit().expect("room in the registry"),
            registry: registry.clone(),
        }
    }

    /// Marks the request waiting on its client for its body until the
    /// returned guard is dropped (see [`Reading`]).
    pub(crate) fn reading(&self) -> Reading {
        let seq = self.state.reading_started();
        Reading {
            state: self.state.clone(),
            seq,
        }
    }
}

/// A request reading its body: waiting on its client, since the last
/// bytes came. While dljob itself makes it wait (for room), it is not
/// ([`Reading::pause`]): a request is never evicted for dljob's own wait.
pub(crate) struct Reading {
    state: Arc<ConnState>,
    seq: u64,
}

impl Reading {
    /// Bytes came, or dljob's own wait is over: waiting on the client from
    /// now.
    pub(crate) fn progress(&self) {
        self.state.reading_progress(self.seq);
    }

    /// dljob makes the request wait: not the client's doing.
    pub(crate) fn pause(&self) {
        self.state.reading_ended(self.seq);
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.state.reading_ended(self.seq);
    }
}

/// An accepted stream that fails every read and write once its connection
/// is past a deadline or evicted: hyper then drops it. Holds the
/// connection's place in the registry until it is dropped.
pub(crate) struct Guarded<IO> {
    io: IO,
    state: Arc<ConnState>,
    limits: Limits,
    stall: Duration,
    timer: Pin<Box<Sleep>>,
    metrics: Metrics,
    _registered: Registered,
}

impl<IO> Guarded<IO> {
    pub(crate) fn state(&self) -> &Arc<ConnState> {
        &self.state
    }
}

impl<IO> Drop for Guarded<IO> {
    fn drop(&mut self) {
        self.metrics.connection_dropped();
    }
}

fn closed(why: Closed) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, why.describe())
}

impl<IO> Guarded<IO> {
    /// Registers the task and arms the timer at the connection's next
    /// deadline: Ready(err) once it is past.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        self.state.task.register(cx.waker());
        if let Some(why) = self.state.doomed() {
            return Poll::Ready(closed(why));
        }
        let Some((deadline, why)) = self.state.deadline(&self.limits, self.stall) else {
            return Poll::Pending;
        };
        if self.timer.deadline() != deadline {
            self.timer.as_mut().reset(deadline);
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                self.state.doom(why, &self.metrics);
                Poll::Ready(closed(why))
            }
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(why) = this.state.doomed() {
            return Poll::Ready(Err(closed(why)));
        }
        if let Some(until) = this.state.paused_until() {
            // Over its refusal rate: nothing is read until it is back
            // within it (a deadline that passes meanwhile is seen then).
            this.state.task.register(cx.waker());
            this.timer.as_mut().reset(until);
            if this.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        if let Poll::Ready(r) = Pin::new(&mut this.io).poll_read(cx, buf) {
            return Poll::Ready(r);
        }
        this.poll_deadline(cx).map(Err)
    }
}

impl<IO: AsyncWrite + Unpin> Guarded<IO> {
    fn write_with(
        &mut self,
        cx: &mut Context<'_>,
        write: impl FnOnce(Pin<&mut IO>, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if let Some(why) = self.state.doomed() {
            return Poll::Ready(Err(closed(why)));
        }
        match write(Pin::new(&mut self.io), cx) {
            Poll::Ready(r) => {
                if matches!(r, Ok(n) if n > 0) {
                    self.state.wrote();
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                self.state.write_blocked();
                self.poll_deadline(cx).map(Err)
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
        self.get_mut()
            .write_with(cx, |io, cx| io.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .write_with(cx, |io, cx| io.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(why) = this.state.doomed() {
            return Poll::Ready(Err(closed(why)));
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.state.doomed().is_some() {
            // Nothing more is written to a connection being dropped.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

/// A connection's service: marks each request in flight from its start
/// until its answer has been sent (or dropped), and hands it the
/// connection ([`Conn`], in its extensions).
#[derive(Clone)]
pub(crate) struct Tracked<S> {
    inner: S,
    conn: Conn,
}

impl<S, B, R> tower_service::Service<http::Request<R>> for Tracked<S>
where
    S: tower_service::Service<http::Request<R>, Response = http::Response<B>>,
{
    type Response = http::Response<TrackedBody<B>>;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<R>) -> Self::Future {
        self.conn.state.request_started();
        request.extensions_mut().insert(self.conn.clone());
        TrackedFuture {
            inner: self.inner.call(request),
            in_flight: Some(InFlight {
                state: self.conn.state.clone(),
                answer: None,
            }),
        }
    }
}

/// Ends its request when dropped: answered, failed or cancelled.
struct InFlight {
    state: Arc<ConnState>,
    /// The answer being sent, once there is one.
    answer: Option<u64>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.state.request_ended(self.answer);
    }
}

pin_project! {
    /// A request's future, in flight until it completes or is dropped;
    /// its answer then carries the request on.
    pub(crate) struct TrackedFuture<F> {
        #[pin]
        inner: F,
        in_flight: Option<InFlight>,
    }
}

impl<F, B, E> Future for TrackedFuture<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
{
    type Output = Result<http::Response<TrackedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = std::task::ready!(this.inner.poll(cx))?;
        let mut in_flight = this.in_flight.take().expect("polled after completion");
        in_flight.answer = Some(in_flight.state.answer_started());
        Poll::Ready(Ok(response.map(|inner| TrackedBody { inner, in_flight })))
    }
}

pin_project! {
    /// An answer's body: its request stays in flight until hyper has taken
    /// the last of it (or dropped it).
    pub(crate) struct TrackedBody<B> {
        #[pin]
        inner: B,
        in_flight: InFlight,
    }
}

impl<B: http_body::Body> http_body::Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn guarded<IO>(io: IO, stall: Duration) -> (Guarded<IO>, Arc<ConnState>, Arc<Registry>) {
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        let registry = Arc::new(Registry::new(4, metrics.clone()));
        let state = registry.admit().unwrap();
        let limits = Limits {
            max_connections: 4,
            first_request: Duration::from_secs(3600),
            idle: Duration::from_secs(3600),
        };
        let g = Guarded {
            io,
            state: state.clone(),
            limits,
            stall,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            metrics,
            _registered: Registered {
                state: state.clone(),
                registry: registry.clone(),
            },
        };
        (g, state, registry)
    }

    /// Whatever is being written (an answer, PING acknowledgements, a
    /// GOAWAY), a write that makes no progress for the stall bound fails,
    /// and so does every read and write after it; progress before the
    /// bound starts the count again.
    #[tokio::test(start_paused = true)]
    async fn a_write_that_makes_no_progress_for_the_bound_ends_the_connection() {
        let stall = Duration::from_secs(10);
        let (ours, mut client) = tokio::io::duplex(64);
        let (mut g, state, registry) = guarded(ours, stall);
        // The client reads nothing: the pipe fills, and the write waits.
        g.write_all(&[1; 64]).await.unwrap();
        let blocked = tokio::time::timeout(Duration::from_secs(9), g.write_all(&[2; 64])).await;
        assert!(blocked.is_err(), "wrote into a full pipe");
        // The client takes some bytes: progress, the count starts again.
        let mut buf = [0u8; 32];
        client.read_exact(&mut buf).await.unwrap();
        g.write_all(&[3; 32]).await.unwrap();
        let started = Instant::now();
        let err = g.write_all(&[4; 64]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), stall);
        assert_eq!(state.doomed(), Some(Closed::WriteStalled));
        assert!(g.read(&mut buf).await.is_err(), "a read after the close");
        drop(g);
        assert!(registry.lock().is_empty(), "its place is given back");
    }

    /// At the cap, the connection that has waited longest on its client
    /// is evicted for a new one; one busy only with dljob's own work (a
    /// review being computed) is not.
    #[tokio::test(start_paused = true)]
    async fn at_the_cap_the_longest_waiting_connection_is_evicted_never_a_busy_one() {
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        let registry = Registry::new(2, metrics);
        let busy = registry.admit().unwrap();
        busy.request_started();
        tokio::time::advance(Duration::from_secs(1)).await;
        let idle = registry.admit().unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        let new = registry.admit().expect("the idle one makes room");
        assert_eq!(idle.doomed(), Some(Closed::Evicted));
        assert_eq!(busy.doomed(), None);
        // Now one is busy and the other waits for its first request.
        new.request_started();
        assert!(registry.admit().is_none(), "every connection is busy");
        // A review's answer not taken: waiting on the client again.
        new.answer_started();
        assert!(registry.admit().is_some());
        assert_eq!(new.doomed(), Some(Closed::Evicted));
    }

    /// A connection whose client has never taken a review's answer whole
    /// goes before one whose client has, however long that one has waited.
    #[tokio::test(start_paused = true)]
    async fn a_client_that_has_read_an_answer_is_evicted_last() {
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        let registry = Registry::new(2, metrics);
        let reader = registry.admit().unwrap();
        reader.answered_whole();
        tokio::time::advance(Duration::from_secs(60)).await;
        let silent = registry.admit().unwrap();
        tokio::time::advance(Duration::from_millis(1)).await;
        registry.admit().expect("room is made");
        assert_eq!(silent.doomed(), Some(Closed::Evicted));
        assert_eq!(reader.doomed(), None);
    }
}
