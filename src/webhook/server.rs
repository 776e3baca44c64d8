//! The HTTPS server: routes, request limits, TLS, graceful shutdown.
//!
//! Handlers only move bytes: read the body (bounded in size and time), hand
//! it to [`admission::review`], write the answer, log one line and count it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Version};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Extension;
use axum::Router;
use axum_server::Handle;
use futures::StreamExt;
use hyper_util::rt::TokioTimer;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::admission::{self, Answer, Endpoint, Summary};
use super::budget::{Budget, Room, Short, Wait};
use super::conn::{Conn, Guard, Limits, Reading, Resource};
use super::frames::Meter;
use super::metrics::{Metrics, Rejection};
use super::tls::{self, TlsError, TlsSource};
use crate::config::Config;
use crate::validate::PeerSource;

/// How the server runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Address to bind; port 0 picks a free one (see [`Running::local_addr`]).
    pub listen: SocketAddr,
    pub tls: TlsSource,
    /// Largest request body accepted (413 above it).
    pub max_body_bytes: usize,
    /// Request body bytes held at once over every connection and stream:
    /// a request waits for room (at most the read timeout, then 503), so
    /// that many slow, large bodies cannot exhaust memory.
    pub max_body_bytes_in_flight: usize,
    /// Time a client may take to send its request headers, and then its
    /// body; also the TLS handshake limit. Slower clients get 408 or are
    /// disconnected.
    pub read_timeout: Duration,
    /// How many connections may be open, and how long one may wait for
    /// its first request and between requests.
    pub connections: Limits,
    /// Where `/metrics` is served instead, over plain HTTP (under the same
    /// connection limits), so that a NetworkPolicy can open the webhook port
    /// to the API server alone and the metrics port to the scraper alone.
    /// None: on the webhook port, with the reviews.
    pub metrics_listen: Option<SocketAddr>,
    /// How often the certificate files are checked for changes.
    pub reload_interval: Duration,
    /// Log every review at INFO; otherwise only denials and reviews with
    /// warnings are (the others at DEBUG).
    pub log_reviews: bool,
    /// The PEM CA bundle whose certificates clients of the webhook port
    /// must present (re-read with the certificate files when it changes):
    /// with it, denials name the job's other members (only the API server
    /// can ask); without, they do not (whoever reaches the port could ask
    /// about any namespace).
    pub client_ca: Option<std::path::PathBuf>,
}

impl Settings {
    /// Defaults for everything but the address and certificate.
    pub fn new(listen: SocketAddr, tls: TlsSource) -> Self {
        Self {
            listen,
            tls,
            max_body_bytes: 3 * 1024 * 1024,
            max_body_bytes_in_flight: 6 * 1024 * 1024,
            read_timeout: Duration::from_secs(10),
            connections: Limits::DEFAULT,
            metrics_listen: None,
            reload_interval: Duration::from_secs(2),
            client_ca: None,
            log_reviews: false,
        }
    }
}

/// What the server reads at every review.
#[derive(Clone)]
pub struct Inputs {
    /// The current config; a new value is used from the next review on.
    pub config: watch::Receiver<Config>,
    /// The job's other members (the reconciler's cache, or none).
    pub peers: Arc<dyn PeerSource>,
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("listening on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
}

/// The plain-HTTP metrics server ([`Settings::metrics_listen`]).
struct MetricsServer {
    addr: SocketAddr,
    handle: Handle<SocketAddr>,
    server: JoinHandle<std::io::Result<()>>,
}

#[derive(Clone)]
struct AppState {
    inputs: Inputs,
    metrics: Metrics,
    registry: Arc<Registry>,
    ready: Arc<AtomicBool>,
    max_body_bytes: usize,
    read_timeout: Duration,
    log_reviews: bool,
    /// The shared budgets, each with a per-connection share (see
    /// [`super::budget`]).
    budgets: Arc<Budgets>,
}

/// What every review shares.
struct Budgets {
    /// Reviews in flight, from their start until their answer is sent.
    requests: Budget,
    /// Bodies of at most [`SMALL_BODY`] (every review the API server sends
    /// of an ordinary object): a lane of their own, so that big bodies
    /// waiting for room never hold a small one back.
    small: Budget,
    /// Bigger bodies (`--max-body-bytes-in-flight`).
    big: Budget,
    /// Answers not yet taken by their client: apart from the requests', so
    /// that an answer never waits behind a request for room.
    answers: Budget,
    /// One review of a big body computed at a time, on the blocking pool:
    /// its tens of milliseconds of CPU and its parsed tree (several times
    /// its bytes) are not multiplied by the clients sending them, and the
    /// async workers go on answering the small ones meanwhile.
    heavy: Budget,
}

impl Budgets {
    fn new(settings: &Settings) -> Self {
        let big = settings
            .max_body_bytes_in_flight
            .max(settings.max_body_bytes);
        Self {
            requests: Budget::new(Resource::Requests, MAX_REQUESTS, MAX_STREAMS as usize),
            small: Budget::new(Resource::SmallBodies, SMALL_BUDGET, CONNECTION_SHARE),
            // A connection: one big body at a time.
            big: Budget::new(Resource::BigBodies, big, settings.max_body_bytes),
            answers: Budget::new(Resource::Answers, ANSWER_BUDGET, CONNECTION_SHARE),
            heavy: Budget::new(Resource::Heavy, 1, 1),
        }
    }
}

/// The largest body that takes the small lane ([`AppState::small_budget`]):
/// an ordinary Pod, StatefulSet or Job review, managedFields included, is
/// a few tens of KiB.
const SMALL_BODY: usize = 256 * 1024;

/// The small lane's room: 32 bodies of [`SMALL_BODY`] (thousands of the
/// API server's, of a few KiB each).
const SMALL_BUDGET: usize = 32 * SMALL_BODY;

/// HTTP/2 streams a connection may have open: the API server sends a
/// handful at a time on a connection, and opens another past this.
const MAX_STREAMS: u32 = 16;

/// Reviews in flight over every connection (a connection holds at most
/// [`MAX_STREAMS`]): each holds its stream's state, headers and task
/// (about 4 KiB, and its header list of at most [`MAX_HEADER_LIST`])
/// besides its body.
const MAX_REQUESTS: usize = 512;

/// Room for answers not yet taken, over every connection: the largest
/// answer is 0.63 MiB (a Volcano-compat launcher), an ordinary one 1–2 KiB;
/// each review being computed holds [`LARGEST_ANSWER`] of it meanwhile.
const ANSWER_BUDGET: usize = 8 * 1024 * 1024;

/// A connection's share of the small lane and of the answers' budget.
const CONNECTION_SHARE: usize = 4 * 1024 * 1024;

/// Above the largest answer dljob gives (0.63 MiB, a Volcano-compat
/// launcher): the room a review of a client that has never taken an
/// answer whole takes in the answers' budget before it is computed (then
/// cut to its answer's size).
const LARGEST_ANSWER: usize = 1024 * 1024;

/// Above an ordinary answer (1–2 KiB; 0.12 MiB at most without
/// `dljob.dev/compat`): the room a review of a client that reads its
/// answers takes before it is computed.
const ORDINARY_ANSWER: usize = 128 * 1024;

/// How long an answer waits for the room of a connection evicted for it.
const ANSWER_WAIT: Duration = Duration::from_secs(1);

/// The HTTP/2 flow-control windows, stream and connection, that dljob
/// opens to a client: RFC 9113's initial 65 535 bytes. hyper gives
/// window back as a handler takes the bytes, and a handler takes the next
/// only once it has room for it, so what a connection can have dljob
/// buffer beyond the budgets is one window, as over HTTP/1.1 one read
/// buffer.
const WINDOW: u32 = 65_535;

/// The largest header list a request may send (HTTP/2's
/// `SETTINGS_MAX_HEADER_LIST_SIZE`): the API server's are a few hundred
/// bytes.
const MAX_HEADER_LIST: u32 = 8 * 1024;

/// How much room a body read takes ahead of the bytes it asks for: one
/// HTTP/2 frame at the default frame size.
const READ_AHEAD: usize = 16 * 1024;

/// How long a small body may take to arrive once its headers have (the
/// read timeout, if shorter): the API server sends a review whole, so a
/// client that trickles one only holds the small lane's room, and must
/// send it anew every 2 s to keep holding it.
const SMALL_BODY_DEADLINE: Duration = Duration::from_secs(2);

/// A running server.
pub struct Running {
    addr: SocketAddr,
    ca_pem: Option<String>,
    ca_origin: Option<crate::certs::CaOrigin>,
    handle: Handle<SocketAddr>,
    ready: Arc<AtomicBool>,
    server: JoinHandle<std::io::Result<()>>,
    reloader: Option<JoinHandle<()>>,
    metrics: Option<MetricsServer>,
}

impl Running {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The metrics server's bound address, when metrics have their own.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr)
    }

    /// The generated CA (PEM) when the certificate is self-signed.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Whether the self-signed CA was reused or made (and why).
    pub(crate) fn ca_origin(&self) -> Option<&crate::certs::CaOrigin> {
        self.ca_origin.as_ref()
    }

    /// Reports not-ready (`/readyz` 503) while still serving every review
    /// for `drain` — the time the API server needs to stop sending reviews to
    /// this replica once its endpoint is removed — then shuts down as
    /// [`Running::shutdown`] does.
    pub async fn drain(self, drain: Duration, grace: Duration) -> std::io::Result<()> {
        self.ready.store(false, Ordering::SeqCst);
        tokio::time::sleep(drain).await;
        self.shutdown(grace).await
    }

    /// Stops accepting connections, lets in-flight requests finish (for at
    /// most `grace`), and returns when the server has stopped.
    pub async fn shutdown(self, grace: Duration) -> std::io::Result<()> {
        self.ready.store(false, Ordering::SeqCst);
        if let Some(r) = &self.reloader {
            r.abort();
        }
        self.handle.graceful_shutdown(Some(grace));
        if let Some(m) = self.metrics {
            m.handle.graceful_shutdown(Some(grace));
            let _ = m.server.await;
        }
        match self.server.await {
            Ok(r) => r,
            Err(e) => Err(std::io::Error::other(e)),
        }
    }
}

/// Starts the webhook server on `settings.listen` and returns once it is
/// bound. The webhook's metrics are added to `registry`, which `/metrics`
/// then serves whole. Must be called inside a tokio runtime.
pub async fn run(
    settings: Settings,
    inputs: Inputs,
    mut registry: Registry,
) -> Result<Running, StartError> {
    let metrics = Metrics::register(&mut registry);
    let mut loaded = tls::load(&settings.tls, settings.client_ca.as_deref())?;
    let mut inputs = inputs;
    if !loaded.client_auth {
        inputs.peers = Arc::new(crate::validate::Withheld(inputs.peers));
    }
    let reloader = loaded.spawn_reloader(settings.reload_interval, metrics.clone());

    let bind = |e| StartError::Bind(settings.listen, e);
    let listener = std::net::TcpListener::bind(settings.listen).map_err(bind)?;
    listener.set_nonblocking(true).map_err(bind)?;
    let addr = listener.local_addr().map_err(bind)?;

    let ready = Arc::new(AtomicBool::new(true));
    let state = AppState {
        inputs,
        metrics,
        registry: Arc::new(registry),
        ready: ready.clone(),
        max_body_bytes: settings.max_body_bytes,
        read_timeout: settings.read_timeout,
        log_reviews: settings.log_reviews,
        budgets: Arc::new(Budgets::new(&settings)),
    };
    let guard = Guard::new(
        settings.connections,
        settings.read_timeout,
        state.metrics.clone(),
    );
    let metrics = match settings.metrics_listen {
        Some(at) => Some(metrics_server(at, settings.connections, state.clone())?),
        None => None,
    };
    let state_metrics = state.metrics.clone();
    let app = router(state, metrics.is_none());

    let handle = Handle::new();
    let read_timeout = settings.read_timeout;
    // Under TLS: the connection limits (the first-request deadline runs
    // from accept, through the handshake) and TCP_NODELAY (an HTTP/2
    // response goes out as separate HEADERS and DATA writes, which Nagle's
    // algorithm plus the peer's delayed ACK would hold back ~40 ms).
    let mut server = axum_server::from_tcp_rustls(listener, loaded.rustls.clone())
        .map_err(bind)?
        .map(|acceptor| {
            Meter::new(
                acceptor.handshake_timeout(read_timeout).acceptor(guard),
                read_timeout,
                state_metrics,
            )
        })
        .handle(handle.clone());
    let http = server.http_builder();
    // A connection's read buffer (hyper's default grows to ~400 KiB while
    // a big body streams in): 64 KiB, far above any review's headers, so
    // that clients streaming big bodies hold little beyond the budget.
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout)
        .max_buf_size(64 * 1024);
    http.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(read_timeout)
        .max_concurrent_streams(MAX_STREAMS)
        .initial_stream_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .max_header_list_size(MAX_HEADER_LIST)
        .max_send_buf_size(ANSWER_CHUNK);
    let server = tokio::spawn(server.serve(app.into_make_service()));

    Ok(Running {
        addr,
        ca_pem: loaded.ca_pem.take(),
        ca_origin: loaded.ca_origin.take(),
        handle,
        ready,
        server,
        reloader,
        metrics,
    })
}

fn router(state: AppState, with_metrics: bool) -> Router {
    let router = Router::new()
        .route("/mutate", post(mutate))
        .route("/validate", post(validate))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz));
    let router = if with_metrics {
        router.route("/metrics", get(metrics))
    } else {
        router
    };
    router.with_state(state)
}

/// `/metrics` alone, over plain HTTP on `at`, under the same connection
/// limits as the webhook port.
fn metrics_server(
    at: SocketAddr,
    limits: Limits,
    state: AppState,
) -> Result<MetricsServer, StartError> {
    let bind = |e| StartError::Bind(at, e);
    let listener = std::net::TcpListener::bind(at).map_err(bind)?;
    listener.set_nonblocking(true).map_err(bind)?;
    let addr = listener.local_addr().map_err(bind)?;
    let handle = Handle::new();
    let guard = Meter::new(
        Guard::new(limits, limits.first_request, state.metrics.clone()),
        limits.first_request,
        state.metrics.clone(),
    );
    // The probes too: with client certificates required on the webhook
    // port, the kubelet (which presents none) probes here.
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(state);
    let mut server = axum_server::from_tcp(listener)
        .map_err(bind)?
        .acceptor(guard)
        .handle(handle.clone());
    server
        .http_builder()
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.first_request);
    let server = tokio::spawn(server.serve(app.into_make_service()));
    Ok(MetricsServer {
        addr,
        handle,
        server,
    })
}

async fn mutate(
    State(s): State<AppState>,
    Extension(conn): Extension<Conn>,
    version: Version,
    headers: HeaderMap,
    body: Body,
) -> Response {
    review(Endpoint::Mutate, &s, &conn, version, &headers, body).await
}

async fn validate(
    State(s): State<AppState>,
    Extension(conn): Extension<Conn>,
    version: Version,
    headers: HeaderMap,
    body: Body,
) -> Response {
    review(Endpoint::Validate, &s, &conn, version, &headers, body).await
}

async fn readyz(State(s): State<AppState>) -> Response {
    if !s.ready.load(Ordering::SeqCst) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining: shutting down\n").into_response()
    } else if !s.inputs.peers.synced() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for the reconciler's member caches to list\n",
        )
            .into_response()
    } else {
        (StatusCode::OK, "ok\n").into_response()
    }
}

async fn metrics(State(s): State<AppState>) -> Response {
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &s.registry) {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        )],
        text,
    )
        .into_response()
}

async fn review(
    endpoint: Endpoint,
    s: &AppState,
    conn: &Conn,
    version: Version,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let start = Instant::now();
    let b = &s.budgets;
    // Its place among the reviews in flight, held until its answer is
    // sent: refused at once, nothing read or computed, over the
    // connection's share or when no stalled connection can give one up.
    let mut slot = b.requests.none(conn);
    if let Err(short) = b
        .requests
        .grow(conn, &mut slot, 1, Wait::ForEvicted(ANSWER_WAIT))
        .await
    {
        return reject(endpoint, s, conn, BodyError::Busy(short), start);
    }
    let (bytes, room) = match read_body(headers, body, s, conn).await {
        Ok(b) => b,
        Err(why) => {
            let mut response = reject(endpoint, s, conn, why, start);
            // An HTTP/1.1 client that sent too much, too slowly or garbage
            // gets its connection closed after the answer.
            if version < Version::HTTP_2 {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            return response;
        }
    };
    // A big body's review waits for its turn at the blocking pool first;
    // then every review takes room for the largest answer before anything
    // is computed, cut to its answer's size after: the answers computed
    // and not yet taken never exceed their budget, and a connection whose
    // unsent answers leave no room in its share is refused before its
    // review costs anything.
    let turn = if bytes.len() <= SMALL_BODY {
        None
    } else {
        let mut turn = b.heavy.none(conn);
        let waited = tokio::time::timeout(
            s.read_timeout,
            b.heavy.grow(conn, &mut turn, 1, Wait::Unbounded),
        )
        .await;
        match waited {
            Ok(Ok(())) => Some(turn),
            Ok(Err(short)) => return reject(endpoint, s, conn, BodyError::Busy(short), start),
            Err(_) => {
                let short = Short::Busy {
                    resource: Resource::Heavy,
                };
                return reject(endpoint, s, conn, BodyError::Busy(short), start);
            }
        }
    };
    // A client that has taken answers whole before reserves room for an
    // ordinary answer, and its answer grows from there into room free or
    // handed over; any other reserves room for the largest (so what a
    // client that never reads makes dljob compute is bounded by the
    // budget, and refused before computing once the budget is full).
    let reserve = if conn.state.has_answered() {
        ORDINARY_ANSWER
    } else {
        LARGEST_ANSWER
    };
    let mut held = b.answers.none(conn);
    if let Err(short) = b
        .answers
        .grow(conn, &mut held, reserve, Wait::ForEvicted(ANSWER_WAIT))
        .await
    {
        return reject(endpoint, s, conn, BodyError::Busy(short), start);
    }
    // A panic inside a review (a defect of dljob's, never the client's) is
    // answered 500 on either path, counted as its own rejection and logged
    // with what it said; the connection and the server go on.
    let answer = match turn {
        None => {
            let config = s.inputs.config.borrow();
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                admission::review(endpoint, &bytes, &config, s.inputs.peers.as_ref())
            }))
            .map_err(|payload| panic_message(payload.as_ref()))
        }
        Some(turn) => {
            let config = s.inputs.config.borrow().clone();
            let peers = s.inputs.peers.clone();
            let answered = tokio::task::spawn_blocking(move || {
                let _turn = turn;
                admission::review(endpoint, &bytes, &config, peers.as_ref())
            })
            .await;
            answered.map_err(|e| match e.try_into_panic() {
                Ok(payload) => panic_message(payload.as_ref()),
                Err(e) => e.to_string(),
            })
        }
    };
    let answer = match answer {
        Ok(answer) => answer,
        Err(why) => return reject(endpoint, s, conn, BodyError::Internal(why), start),
    };
    // The request's bytes are gone: their room goes back.
    drop(room);
    match answer {
        Answer::Review { body, summary } => {
            // The answer's bytes stay held in the answers' budget until
            // they are taken: a client that never reads holds them until
            // its connection's stall deadline, and at most its share.
            // Grown into room free or handed over only, never waited for:
            // no computed answer is held outside the budget.
            if let Err(short) = b
                .answers
                .grow_to(
                    conn,
                    &mut held,
                    body.len(),
                    Wait::ForEvicted(Duration::ZERO),
                )
                .await
            {
                return reject(endpoint, s, conn, BodyError::Busy(short), start);
            }
            held.shrink_to(body.len());
            let latency = start.elapsed();
            s.metrics.observe_review(endpoint, &summary, latency);
            log_review(endpoint, &summary, latency, s.log_reviews);
            (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                Body::new(HeldBody {
                    bytes: Bytes::from(body),
                    at: 0,
                    _held: [held, slot],
                }),
            )
                .into_response()
        }
        Answer::BadRequest(message) => {
            reject(endpoint, s, conn, BodyError::BadRequest(message), start)
        }
    }
}

/// An answer's bytes, given to hyper in pieces of [`ANSWER_CHUNK`] and
/// held in the answers' budget, with the review's place among those in
/// flight, until hyper has taken the last one: hyper asks for the next
/// piece only once it has sent the last, so a client that does not read
/// keeps at most a piece in hyper's buffer beyond what the budget counts.
struct HeldBody {
    bytes: Bytes,
    at: usize,
    _held: [Room; 2],
}

/// The size of the pieces of an answer.
const ANSWER_CHUNK: usize = 64 * 1024;

impl http_body::Body for HeldBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.at >= this.bytes.len() {
            return std::task::Poll::Ready(None);
        }
        let end = (this.at + ANSWER_CHUNK).min(this.bytes.len());
        let piece = this.bytes.slice(this.at..end);
        this.at = end;
        if end == this.bytes.len() {
            // The last piece: the client has taken the rest.
            this._held[0].state().answered_whole();
        }
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.at >= self.bytes.len()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact((self.bytes.len() - self.at) as u64)
    }
}

/// A request answered without an AdmissionReview.
enum BodyError {
    TooLarge(usize),
    Timeout(Duration),
    /// No room in a shared budget in time, or the connection holds its
    /// share.
    Busy(Short),
    Read(String),
    BadRequest(String),
    /// The review itself failed (a panic): dljob's defect.
    Internal(String),
}

/// What a panic said, as far as it said it in text.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Most bytes of an over-limit body read (and dropped) before answering
/// 413: an HTTP/2 client still sending when the answer comes gets its
/// stream reset and reports a framing error instead of the 413 (curl: 92),
/// so a body of a plausible size is read to its end first. Larger ones are
/// answered at once.
const DRAIN_LIMIT: u64 = 16 * 1024 * 1024;

/// Reads a request body: at most `s.max_body_bytes`, within the read
/// timeout, each byte held in its lane until the review is answered (the
/// room returned).
///
/// A body that declares at most [`SMALL_BODY`] takes the small lane (and
/// is cut there: hyper ends a body at its declared length); any other the
/// big one. Once bytes have come, room is taken before the next are
/// asked for (at most [`READ_AHEAD`] ahead of them, never for a declared
/// length: a client that declares 3 MiB and sends one byte holds one
/// byte and [`READ_AHEAD`]), so what the client sends beyond it waits in
/// its window. Returns the body and its room.
async fn read_body(
    headers: &HeaderMap,
    body: Body,
    s: &AppState,
    conn: &Conn,
) -> Result<(Bytes, Room), BodyError> {
    let (limit, timeout) = (s.max_body_bytes, s.read_timeout);
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > DRAIN_LIMIT) {
        return Err(BodyError::TooLarge(limit));
    }
    let (lane, timeout) = match declared {
        Some(n) if n <= SMALL_BODY as u64 => (&s.budgets.small, timeout.min(SMALL_BODY_DEADLINE)),
        _ => (&s.budgets.big, timeout),
    };
    let reading = conn.reading();
    let mut held = lane.none(conn);
    // Whether the read is waiting for room (a timeout then is a 503).
    let waiting = std::sync::atomic::AtomicBool::new(false);
    let read = async {
        // A body that arrives as one chunk (the usual case) is used as is;
        // only a body in several chunks is copied into one buffer.
        let mut first: Option<Bytes> = None;
        let mut buf = Vec::new();
        let mut len = 0;
        let mut too_large = declared.is_some_and(|n| n > limit as u64);
        let mut stream = body.into_data_stream();
        loop {
            // Room ahead of the next bytes once some have come (a request
            // that has sent nothing holds nothing and waits on its client).
            if !too_large && len > 0 {
                let ahead = declared.map_or(READ_AHEAD, |d| {
                    usize::try_from(d)
                        .unwrap_or(usize::MAX)
                        .saturating_sub(len)
                        .min(READ_AHEAD)
                });
                let want = (len + ahead).min(limit);
                room_for(lane, conn, &mut held, want, &reading, &waiting).await?;
            }
            let Some(chunk) = stream.next().await else {
                break;
            };
            let chunk = chunk.map_err(|e| BodyError::Read(e.to_string()))?;
            reading.progress();
            len += chunk.len();
            if too_large || len > limit {
                too_large = true;
                if len as u64 > DRAIN_LIMIT {
                    break;
                }
                continue;
            }
            room_for(lane, conn, &mut held, len, &reading, &waiting).await?;
            if first.is_none() && buf.is_empty() {
                first = Some(chunk);
                continue;
            }
            if let Some(f) = first.take() {
                buf.reserve(len);
                buf.extend_from_slice(&f);
            }
            buf.extend_from_slice(&chunk);
        }
        if too_large {
            return Err(BodyError::TooLarge(limit));
        }
        Ok(first.unwrap_or_else(|| Bytes::from(buf)))
    };
    let result = tokio::time::timeout(timeout, read).await;
    let busy = Short::Busy {
        resource: lane_resource(declared),
    };
    match result {
        Ok(Ok(bytes)) => {
            held.shrink_to(bytes.len());
            Ok((bytes, held))
        }
        Ok(Err(e)) => Err(e),
        Err(_) if waiting.load(Ordering::Relaxed) => Err(BodyError::Busy(busy)),
        Err(_) => Err(BodyError::Timeout(timeout)),
    }
}

/// `held` grown to `want` bytes in `lane`. While dljob waits for the room,
/// a request whose client has taken answers whole before is not waiting on
/// its client (and is not evicted for it); one whose client never has
/// still is.
async fn room_for(
    lane: &Budget,
    conn: &Conn,
    held: &mut Room,
    want: usize,
    reading: &Reading,
    waiting: &std::sync::atomic::AtomicBool,
) -> Result<(), BodyError> {
    waiting.store(true, Ordering::Relaxed);
    let trusted = conn.state.has_answered();
    if trusted {
        reading.pause();
    }
    let grown = lane.grow_to(conn, held, want, Wait::Unbounded).await;
    if trusted {
        reading.progress();
    }
    waiting.store(false, Ordering::Relaxed);
    grown.map_err(BodyError::Busy)
}

/// The lane a body of `declared` length takes.
fn lane_resource(declared: Option<u64>) -> Resource {
    match declared {
        Some(n) if n <= SMALL_BODY as u64 => Resource::SmallBodies,
        _ => Resource::BigBodies,
    }
}

fn reject(
    endpoint: Endpoint,
    s: &AppState,
    conn: &Conn,
    why: BodyError,
    start: Instant,
) -> Response {
    conn.state.refused();
    let (status, kind, message) = match why {
        BodyError::TooLarge(limit) => (
            StatusCode::PAYLOAD_TOO_LARGE,
            Rejection::TooLarge,
            format!("request body is larger than {limit} bytes: raise --max-body-bytes"),
        ),
        BodyError::Timeout(t) => (
            StatusCode::REQUEST_TIMEOUT,
            Rejection::Timeout,
            format!("request body not received within {} s", t.as_secs_f64()),
        ),
        BodyError::Busy(short) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Rejection::Busy,
            short.describe(),
        ),
        BodyError::Read(e) => (
            StatusCode::BAD_REQUEST,
            Rejection::ReadError,
            format!("reading the request body: {e}"),
        ),
        BodyError::BadRequest(m) => (StatusCode::BAD_REQUEST, Rejection::BadRequest, m),
        BodyError::Internal(m) => {
            // Not rate-limited with the clients' refusals: a defect of
            // dljob's is said every time, at ERROR.
            tracing::error!(endpoint = endpoint.as_str(), panic = %m, "a review panicked: answered 500 (please report it with this line)");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                Rejection::Panic,
                "the review failed inside dljob (a panic, logged); the API server applies the webhook's failurePolicy".to_owned(),
            )
        }
    };
    s.metrics.observe_rejection(endpoint, kind, start.elapsed());
    // Any client can make these: limited as review lines are.
    if let Some(suppressed) = REJECTION_LOG.admit(std::time::SystemTime::now()) {
        tracing::warn!(
            endpoint = endpoint.as_str(),
            status = status.as_u16(),
            error = %message,
            suppressed,
            "request refused"
        );
    }
    (status, format!("dljob: {message}\n")).into_response()
}

/// One line per review worth an operator's attention at the default level:
/// denials and reviews with warnings at INFO; the others at DEBUG (at 16 000
/// reviews/s an INFO line each would be ~100 MB of logs a minute and a third
/// of the CPU), or at INFO with `--log-reviews`.
/// Review lines logged at INFO a second, at most.
const LOG_LINES_PER_SECOND: u64 = 20;

/// The review log's rate limit: lines in the current second, and those
/// suppressed since the last line logged.
struct LogLimit {
    second: std::sync::atomic::AtomicU64,
    lines: std::sync::atomic::AtomicU64,
    suppressed: std::sync::atomic::AtomicU64,
}

static REVIEW_LOG: LogLimit = LogLimit::new();

/// Refused requests' lines ([`reject`]), limited apart from the reviews'.
static REJECTION_LOG: LogLimit = LogLimit::new();

impl LogLimit {
    const fn new() -> Self {
        Self {
            second: std::sync::atomic::AtomicU64::new(0),
            lines: std::sync::atomic::AtomicU64::new(0),
            suppressed: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Whether a line may be logged at `now`: with how many were
    /// suppressed before it, or None (counted as suppressed).
    fn admit(&self, now: std::time::SystemTime) -> Option<u64> {
        let second = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if self.second.swap(second, Ordering::Relaxed) != second {
            self.lines.store(0, Ordering::Relaxed);
        }
        if self.lines.fetch_add(1, Ordering::Relaxed) < LOG_LINES_PER_SECOND {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

fn log_review(endpoint: Endpoint, s: &Summary, latency: Duration, every: bool) {
    let notable = every || !s.allowed || s.warnings > 0;
    if !notable && !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    // Any client can make refusals: at most LOG_LINES_PER_SECOND lines a
    // second, the rest counted and said with the next line logged.
    let suppressed = if notable {
        match REVIEW_LOG.admit(std::time::SystemTime::now()) {
            Some(n) => n,
            None => return,
        }
    } else {
        0
    };
    let object = if s.namespace.is_empty() {
        s.name.clone()
    } else {
        format!("{}/{}", s.namespace, s.name)
    };
    let latency_ms = (latency.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0;
    // A denial's message is recorded only when there is one (as `denial`:
    // `message` is the event's own field in JSON lines).
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                endpoint = endpoint.as_str(),
                uid = %s.uid,
                kind = %s.kind,
                object = %object,
                operation = %s.operation,
                dry_run = s.dry_run,
                allowed = s.allowed,
                patch_ops = s.patch_ops,
                warnings = s.warnings,
                latency_ms,
                denial = s.message.as_deref(),
                rule = s.rule,
                suppressed_before = suppressed,
                "review"
            )
        };
    }
    if notable {
        line!(info);
    } else {
        line!(debug);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// An answer's bytes stay counted in the budget, and as its
    /// connection's, until hyper has taken the last piece (a client that
    /// does not read holds them), and are given in pieces of 64 KiB.
    #[tokio::test]
    async fn an_answer_holds_its_room_until_its_last_piece_is_taken() {
        let conn = Conn::for_test();
        let budget = Budget::new(Resource::Answers, 1_000_000, 500_000);
        let slots = Budget::new(Resource::Requests, 4, 1);
        let len = 200_000;
        let mut room = budget.none(&conn);
        budget
            .grow(&conn, &mut room, len, Wait::Unbounded)
            .await
            .unwrap();
        let mut slot = slots.none(&conn);
        slots
            .grow(&conn, &mut slot, 1, Wait::Unbounded)
            .await
            .unwrap();
        let mut body = HeldBody {
            bytes: Bytes::from(vec![b'x'; len]),
            at: 0,
            _held: [room, slot],
        };
        let mut pieces = Vec::new();
        while let Some(frame) = body.frame().await {
            pieces.push(frame.unwrap().into_data().unwrap().len());
            assert_eq!(budget.available(), 1_000_000 - len);
        }
        assert_eq!(pieces, [65_536, 65_536, 65_536, 3_392]);
        assert_eq!(
            conn.state.holds(Resource::Answers),
            len,
            "until the body goes"
        );
        assert_eq!(conn.state.holds(Resource::Requests), 1);
        // A second review on the same connection is over its share of one.
        let mut second = slots.none(&conn);
        assert_eq!(
            slots
                .grow(&conn, &mut second, 1, Wait::Unbounded)
                .await
                .err(),
            Some(Short::Share {
                resource: Resource::Requests,
                share: 1
            })
        );
        drop(body);
        assert_eq!(budget.available(), 1_000_000);
        assert_eq!(slots.available(), 4);
        assert_eq!(conn.state.holds(Resource::Answers), 0);
        assert_eq!(conn.state.holds(Resource::Requests), 0);
    }

    /// Review log lines: at most 20 a second, the rest counted and said
    /// with the next line logged.
    #[test]
    fn review_lines_are_rate_limited_and_the_rest_counted() {
        let limit = LogLimit {
            second: std::sync::atomic::AtomicU64::new(0),
            lines: std::sync::atomic::AtomicU64::new(0),
            suppressed: std::sync::atomic::AtomicU64::new(0),
        };
        let t = |s: u64| std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s);
        let first: Vec<Option<u64>> = (0..25).map(|_| limit.admit(t(0))).collect();
        assert_eq!(first.iter().filter(|a| a.is_some()).count(), 20);
        assert_eq!(first[20..], [None; 5]);
        assert_eq!(
            limit.admit(t(1)),
            Some(5),
            "the next second says 5 were left out"
        );
        assert_eq!(limit.admit(t(1)), Some(0));
    }
}
