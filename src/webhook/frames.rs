//! HTTP/2 frames as they go by, above TLS: what the `h2` crate does not
//! bound, bounded here, from the 9-byte frame headers alone (RFC 9113
//! §4.1; nothing is decoded or changed — the bytes go on to hyper as read).
//!
//! - **Control frames** (PRIORITY, RST_STREAM, SETTINGS, PING,
//!   WINDOW_UPDATE and unknown types) cost work and carry none: a
//!   connection may send [`CONTROL_PER_SECOND`] of them a second (a burst
//!   of as many), past which its reads pause until it is back within the
//!   rate. The API server sends a few a second; a flood of
//!   WINDOW_UPDATEs took a whole core before.
//! - **Unfinished header blocks** (a HEADERS frame without END_HEADERS,
//!   then CONTINUATIONs) are buffered whole by the `h2` crate until they
//!   end — up to six 16 KiB frames a connection. Over every connection,
//!   at most [`HEADER_BLOCK_BUDGET`] bytes of them may be open, and each
//!   must end within the read timeout; a connection past either is closed.
//!   The API server sends its few hundred bytes of headers in one frame.
//!
//! A connection that does not begin with the HTTP/2 preface (HTTP/1.1) is
//! not read further.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::conn::{ConnState, Guarded};
use super::metrics::{Closed, Metrics};

/// Control frames a connection may send a second, and in a burst.
pub(crate) const CONTROL_PER_SECOND: u32 = 1_000;

/// Bytes of unfinished HTTP/2 header blocks over every connection.
pub(crate) const HEADER_BLOCK_BUDGET: usize = 1024 * 1024;

/// The client's connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The acceptor over TLS (or over the bare stream): wraps each connection
/// in [`Metered`].
#[derive(Clone)]
pub(crate) struct Meter<A> {
    inner: A,
    shared: Arc<Shared>,
}

/// What every connection of a port shares.
struct Shared {
    /// Bytes of unfinished header blocks open now.
    open_blocks: AtomicUsize,
    budget: usize,
    /// How long a header block may stay unfinished.
    deadline: Duration,
    metrics: Metrics,
}

impl<A> Meter<A> {
    /// `deadline`: how long a header block may stay unfinished.
    pub(crate) fn new(inner: A, deadline: Duration, metrics: Metrics) -> Self {
        Self {
            inner,
            shared: Arc::new(Shared {
                open_blocks: AtomicUsize::new(0),
                budget: HEADER_BLOCK_BUDGET,
                deadline,
                metrics,
            }),
        }
    }
}

/// A stream whose connection dljob tracks ([`ConnState`]).
pub(crate) trait Tracked {
    fn conn_state(&self) -> Arc<ConnState>;
}

impl<IO> Tracked for Guarded<IO> {
    fn conn_state(&self) -> Arc<ConnState> {
        self.state().clone()
    }
}

impl<IO: Tracked> Tracked for tokio_rustls::server::TlsStream<IO> {
    fn conn_state(&self) -> Arc<ConnState> {
        self.get_ref().0.conn_state()
    }
}

impl<A, I, S> axum_server::accept::Accept<I, S> for Meter<A>
where
    A: axum_server::accept::Accept<I, S>,
    A::Future: Send + 'static,
    A::Stream: Tracked + Send + 'static,
    A::Service: Send + 'static,
{
    type Stream = Metered<A::Stream>;
    type Service = A::Service;
    type Future = BoxFuture<'static, io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let accepted = self.inner.accept(stream, service);
        let shared = self.shared.clone();
        Box::pin(async move {
            let (io, service) = accepted.await?;
            let state = io.conn_state();
            Ok((Metered::new(io, state, shared), service))
        })
    }
}

/// Where the scan is in the byte stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scan {
    /// Matching the preface: this many bytes of it so far.
    Preface(usize),
    /// A frame header: this many of its 9 bytes so far.
    Header(usize),
    /// Inside a payload: this many bytes left.
    Payload(usize),
    /// Not HTTP/2: nothing more is read.
    Off,
}

/// A frame header read, as far as the meter cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Head {
    len: usize,
    kind: u8,
    flags: u8,
}

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const CONTINUATION: u8 = 9;
const PUSH_PROMISE: u8 = 5;
const GOAWAY: u8 = 7;
const END_HEADERS: u8 = 0x4;

impl Head {
    fn parse(b: &[u8; 9]) -> Self {
        Self {
            len: usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
        }
    }

    /// Frames that cost work and carry none of a request's.
    fn is_control(self) -> bool {
        !matches!(
            self.kind,
            DATA | HEADERS | CONTINUATION | PUSH_PROMISE | GOAWAY
        )
    }
}

/// What the frames read so far mean for the connection.
#[derive(Debug)]
struct Frames {
    scan: Scan,
    header: [u8; 9],
    /// Control frames since the bucket was last filled, less its tokens.
    tokens: f64,
    filled: Option<Instant>,
    /// An unfinished header block: since when, and its bytes.
    block: Option<(Instant, usize)>,
}

/// What a scan found that ends the connection.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Go,
    OverBudget,
}

impl Frames {
    fn new() -> Self {
        Self {
            scan: Scan::Preface(0),
            header: [0; 9],
            tokens: f64::from(CONTROL_PER_SECOND),
            filled: None,
            block: None,
        }
    }

    /// Reads `bytes` (the next the client sent); counts control frames and
    /// open header-block bytes (taken from, or given back to, `open`).
    fn scan(&mut self, mut bytes: &[u8], now: Instant, shared: &Shared) -> Verdict {
        while !bytes.is_empty() {
            match self.scan {
                Scan::Off => return Verdict::Go,
                Scan::Preface(n) => {
                    let take = (PREFACE.len() - n).min(bytes.len());
                    if bytes[..take] != PREFACE[n..n + take] {
                        self.scan = Scan::Off;
                        return Verdict::Go;
                    }
                    bytes = &bytes[take..];
                    self.scan = if n + take == PREFACE.len() {
                        Scan::Header(0)
                    } else {
                        Scan::Preface(n + take)
                    };
                }
                Scan::Header(n) => {
                    let take = (9 - n).min(bytes.len());
                    self.header[n..n + take].copy_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if n + take < 9 {
                        self.scan = Scan::Header(n + take);
                        continue;
                    }
                    let head = Head::parse(&self.header);
                    if self.frame(head, now, shared) == Verdict::OverBudget {
                        return Verdict::OverBudget;
                    }
                    self.scan = if head.len == 0 {
                        Scan::Header(0)
                    } else {
                        Scan::Payload(head.len)
                    };
                }
                Scan::Payload(left) => {
                    let take = left.min(bytes.len());
                    bytes = &bytes[take..];
                    self.scan = if take == left {
                        Scan::Header(0)
                    } else {
                        Scan::Payload(left - take)
                    };
                }
            }
        }
        Verdict::Go
    }

    fn frame(&mut self, head: Head, now: Instant, shared: &Shared) -> Verdict {
        if head.is_control() {
            self.refill(now);
            self.tokens -= 1.0;
        }
        let opens = head.kind == HEADERS;
        let continues = head.kind == CONTINUATION && self.block.is_some();
        if !(opens || continues) {
            return Verdict::Go;
        }
        if head.flags & END_HEADERS != 0 {
            self.close_block(shared);
            return Verdict::Go;
        }
        let (since, held) = self.block.unwrap_or((now, 0));
        let now_open = shared.open_blocks.fetch_add(head.len, Ordering::Relaxed) + head.len;
        self.block = Some((since, held + head.len));
        if now_open > shared.budget {
            return Verdict::OverBudget;
        }
        Verdict::Go
    }

    fn close_block(&mut self, shared: &Shared) {
        if let Some((_, held)) = self.block.take() {
            shared.open_blocks.fetch_sub(held, Ordering::Relaxed);
        }
    }

    fn refill(&mut self, now: Instant) {
        let rate = f64::from(CONTROL_PER_SECOND);
        if let Some(last) = self.filled {
            let more = now.saturating_duration_since(last).as_secs_f64() * rate;
            self.tokens = (self.tokens + more).min(rate);
        }
        self.filled = Some(now);
    }

    /// When reads may go on, if the connection is over its rate.
    fn paused_until(&mut self, now: Instant) -> Option<Instant> {
        self.refill(now);
        (self.tokens < 0.0)
            .then(|| now + Duration::from_secs_f64(-self.tokens / f64::from(CONTROL_PER_SECOND)))
    }
}

/// A connection's stream with its HTTP/2 frames metered (see the module).
pub(crate) struct Metered<IO> {
    io: IO,
    frames: Frames,
    state: Arc<ConnState>,
    shared: Arc<Shared>,
    timer: Pin<Box<Sleep>>,
}

impl<IO> Metered<IO> {
    fn new(io: IO, state: Arc<ConnState>, shared: Arc<Shared>) -> Self {
        Self {
            io,
            frames: Frames::new(),
            state,
            shared,
            timer: Box::pin(tokio::time::sleep_until(Instant::now())),
        }
    }

    fn close(&mut self, why: Closed) -> io::Error {
        self.state.doom(why, &self.shared.metrics);
        self.frames.close_block(&self.shared);
        io::Error::other(why.describe())
    }

    /// Pending while the connection is over its control-frame rate (the
    /// timer armed), or Ready(err) once its header block is late.
    fn poll_gate(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let now = Instant::now();
        let late = self
            .frames
            .block
            .map(|(since, _)| since + self.shared.deadline);
        if late.is_some_and(|t| now >= t) {
            return Poll::Ready(Err(self.close(Closed::HeaderBlock)));
        }
        let Some(until) = self.frames.paused_until(now) else {
            return Poll::Ready(Ok(()));
        };
        self.timer.as_mut().reset(until);
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Ok(())),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Arms the timer at the open header block's deadline, if any.
    fn watch_block(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let Some((since, _)) = self.frames.block else {
            return Poll::Pending;
        };
        let at = since + self.shared.deadline;
        if self.timer.deadline() != at {
            self.timer.as_mut().reset(at);
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(self.close(Closed::HeaderBlock)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<IO> Drop for Metered<IO> {
    fn drop(&mut self) {
        self.frames.close_block(&self.shared);
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Metered<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.frames.scan == Scan::Off {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        std::task::ready!(this.poll_gate(cx))?;
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = &buf.filled()[before..];
                if this.frames.scan(read, Instant::now(), &this.shared) == Verdict::OverBudget {
                    return Poll::Ready(Err(this.close(Closed::HeaderBlock)));
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.watch_block(cx).map(Err),
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Metered<IO> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(budget: usize) -> Shared {
        Shared {
            open_blocks: AtomicUsize::new(0),
            budget,
            deadline: Duration::from_secs(1),
            metrics: Metrics::register(&mut prometheus_client::registry::Registry::default()),
        }
    }

    /// RFC 9113 §4.1: length (24 bits), type, flags, stream (31 bits).
    fn frame(kind: u8, flags: u8, payload_len: usize) -> Vec<u8> {
        let len = u32::try_from(payload_len).unwrap().to_be_bytes();
        let mut out = vec![len[1], len[2], len[3], kind, flags, 0, 0, 0, 1];
        out.resize(9 + payload_len, 0x61);
        out
    }

    /// Feeds `bytes` in pieces of `piece` bytes.
    fn feed(frames: &mut Frames, bytes: &[u8], piece: usize, s: &Shared) -> Verdict {
        let now = Instant::now();
        for chunk in bytes.chunks(piece) {
            if frames.scan(chunk, now, s) == Verdict::OverBudget {
                return Verdict::OverBudget;
            }
        }
        Verdict::Go
    }

    #[tokio::test]
    async fn control_frames_are_counted_wherever_the_reads_split_them() {
        for piece in [1, 5, 9, 13, 4096] {
            let s = shared(1 << 20);
            let mut f = Frames::new();
            let mut bytes = PREFACE.to_vec();
            bytes.extend(frame(4, 0, 0)); // SETTINGS
            for _ in 0..10 {
                bytes.extend(frame(8, 0, 4)); // WINDOW_UPDATE
                bytes.extend(frame(0, 0, 100)); // DATA: not counted
            }
            bytes.extend(frame(6, 0, 8)); // PING
            assert_eq!(feed(&mut f, &bytes, piece, &s), Verdict::Go);
            let spent = f64::from(CONTROL_PER_SECOND) - f.tokens;
            assert!((11.9..12.1).contains(&spent), "piece {piece}: {spent}");
            assert_eq!(f.scan, Scan::Header(0), "piece {piece}");
        }
    }

    #[tokio::test]
    async fn http1_is_not_read_past_its_first_bytes() {
        let s = shared(1 << 20);
        let mut f = Frames::new();
        feed(&mut f, b"POST /mutate HTTP/1.1\r\n", 3, &s);
        assert_eq!(f.scan, Scan::Off);
        assert_eq!(f.tokens, f64::from(CONTROL_PER_SECOND));
    }

    #[tokio::test]
    async fn over_the_rate_reads_pause_for_as_long_as_the_excess_takes() {
        let s = shared(1 << 20);
        let mut f = Frames::new();
        let mut bytes = PREFACE.to_vec();
        let n = CONTROL_PER_SECOND as usize + 500;
        for _ in 0..n {
            bytes.extend(frame(8, 0, 4));
        }
        let now = Instant::now();
        f.scan(&bytes, now, &s);
        let until = f.paused_until(now).expect("over the rate");
        let pause = until - now;
        assert!(
            (Duration::from_millis(490)..Duration::from_millis(510)).contains(&pause),
            "{pause:?}"
        );
        assert_eq!(f.paused_until(until + Duration::from_millis(1)), None);
    }

    #[tokio::test]
    async fn unfinished_header_blocks_are_held_against_one_budget_until_they_end() {
        let s = shared(40_000);
        let (mut a, mut b) = (Frames::new(), Frames::new());
        let mut opening = PREFACE.to_vec();
        opening.extend(frame(1, 0, 16_000)); // HEADERS, no END_HEADERS
        assert_eq!(feed(&mut a, &opening, 1000, &s), Verdict::Go);
        assert_eq!(feed(&mut b, &opening, 7, &s), Verdict::Go);
        assert_eq!(s.open_blocks.load(Ordering::Relaxed), 32_000);
        assert!(a.block.is_some());
        // The block ends: its bytes go back.
        assert_eq!(
            feed(&mut a, &frame(9, END_HEADERS, 100), 50, &s),
            Verdict::Go
        );
        assert_eq!(s.open_blocks.load(Ordering::Relaxed), 16_000);
        assert!(a.block.is_none());
        // A HEADERS frame that ends its block holds nothing.
        assert_eq!(
            feed(&mut a, &frame(1, END_HEADERS, 9_000), 4096, &s),
            Verdict::Go
        );
        assert_eq!(s.open_blocks.load(Ordering::Relaxed), 16_000);
        // Past the budget: the connection that went over is told so.
        assert_eq!(feed(&mut b, &frame(9, 0, 16_000), 4096, &s), Verdict::Go);
        assert_eq!(
            feed(&mut b, &frame(9, 0, 16_000), 4096, &s),
            Verdict::OverBudget
        );
        b.close_block(&s);
        assert_eq!(s.open_blocks.load(Ordering::Relaxed), 0);
    }
}
