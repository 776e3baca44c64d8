//! The attackers of `benches/load.rs --hostage`: clients that try to hold
//! admission hostage by what they keep the server holding (answers they do
//! not read, streams and header blocks they do not finish, bytes they
//! trickle, writes they do not take) or by the work they make it do
//! (control frames). HTTP/2 is spoken by the `h2` crate's client where
//! the attack is a client's ordinary use of the protocol (a window of 0,
//! streams without their bodies, slow bodies) and as raw frames, written
//! to RFC 9113 §4.1's 9-byte header, where no client library sends such
//! frames (floods, header blocks that never end).
//!
//! Each attacker holds one connection at a time and opens another
//! [`RECONNECT`] after the server closes it (or refuses it), until
//! `stop`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Bytes;
use hyper::Request;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// How long an attacker waits before it connects again.
pub(crate) const RECONNECT: Duration = Duration::from_millis(200);

/// The attacks, each run alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attack {
    /// HTTP/2 clients that open no window (`SETTINGS_INITIAL_WINDOW_SIZE`
    /// 0) and ask, on every stream they may, for the largest answer.
    WindowZero,
    /// HTTP/1.1 clients that pipeline requests for the largest answer and
    /// never read (a 4 KiB receive buffer).
    Pipeline,
    /// HTTP/2 clients whose streams send a body's first 64 KiB at once and
    /// then a byte a second.
    Trickle,
    /// At a cap of 32 connections, 40 clients that stop reading: half
    /// flood PINGs, half pipeline requests for the largest answer.
    Stallers,
    /// HTTP/2 clients that open every stream they may, each a review whose
    /// body never comes.
    HeldStreams,
    /// HTTP/2 clients that start a header block of 80 KiB (a HEADERS frame
    /// and four CONTINUATIONs) and never end it.
    HeaderBlocks,
    /// HTTP/2 clients that open a stream and flood WINDOW_UPDATEs on it.
    WindowUpdates,
}

impl Attack {
    pub(crate) const ALL: [Attack; 7] = [
        Attack::WindowZero,
        Attack::Pipeline,
        Attack::Trickle,
        Attack::Stallers,
        Attack::HeldStreams,
        Attack::HeaderBlocks,
        Attack::WindowUpdates,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Attack::WindowZero => "window-0 HTTP/2 holders",
            Attack::Pipeline => "HTTP/1.1 pipelining non-readers",
            Attack::Trickle => "HTTP/2 trickled bodies",
            Attack::Stallers => "stalled writers at a cap of 32",
            Attack::HeldStreams => "held body-less HTTP/2 streams",
            Attack::HeaderBlocks => "unfinished HTTP/2 header blocks",
            Attack::WindowUpdates => "WINDOW_UPDATE flood on a stream",
        }
    }

    /// `--max-connections` for the server (None: the default).
    pub(crate) fn cap(self) -> Option<usize> {
        match self {
            Attack::Stallers => Some(32),
            _ => None,
        }
    }

    /// Attacking connections: every connection the server allows but the
    /// ordinary client's, except where the attack is to hold the most per
    /// connection (32 window-0 holders ask for 32 × 16 answers of 0.6 MiB,
    /// 20 times the answers' budget; more only add reviews computed, as
    /// any client can ask for), 40 stallers at a cap of 32, and 50
    /// flooders, as measured when the flood took a core.
    pub(crate) fn connections(self, cap: usize, ordinary: usize) -> usize {
        match self {
            Attack::WindowZero => 32,
            Attack::Stallers => 40,
            Attack::WindowUpdates => 50,
            _ => cap - ordinary,
        }
    }
}

/// What the attackers got.
#[derive(Default)]
pub(crate) struct Counts {
    /// Connections opened (TLS handshake done).
    pub connected: AtomicU64,
    /// Connections refused or closed by the server before the handshake.
    pub refused: AtomicU64,
    /// Answer heads received, by status: 2xx.
    pub answered: AtomicU64,
    /// Answer heads received: 4xx or 5xx.
    pub turned_away: AtomicU64,
}

/// One attacker's connection, whatever it speaks.
pub(crate) struct Target {
    pub addr: SocketAddr,
    pub h1: TlsConnector,
    pub h2: TlsConnector,
    /// A review whose answer is the largest dljob gives (0.6 MiB).
    pub big: Bytes,
}

async fn tls(
    t: &Target,
    connector: &TlsConnector,
    rcvbuf: Option<u32>,
) -> Option<TlsStream<TcpStream>> {
    let socket = tokio::net::TcpSocket::new_v4().ok()?;
    if let Some(n) = rcvbuf {
        socket.set_recv_buffer_size(n).ok()?;
    }
    let tcp = socket.connect(t.addr).await.ok()?;
    let _ = tcp.set_nodelay(true);
    tokio::time::timeout(
        Duration::from_secs(10),
        connector.connect(ServerName::try_from("localhost").unwrap(), tcp),
    )
    .await
    .ok()?
    .ok()
}

#[path = "h2frames.rs"]
mod h2frames;
pub(crate) use h2frames::frame;
use h2frames::{post_mutate_headers, preface, unfinished_block};

/// Starts `n` attackers of `attack` on `runtime` (the attackers' own, so
/// that their work does not delay the ordinary client's tasks).
pub(crate) fn start(
    runtime: &tokio::runtime::Handle,
    attack: Attack,
    n: usize,
    target: Arc<Target>,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|k| {
            let (target, stop, counts) = (target.clone(), stop.clone(), counts.clone());
            runtime.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let kind = match attack {
                        Attack::Stallers if k % 2 == 0 => Attack::WindowUpdates,
                        Attack::Stallers => Attack::Pipeline,
                        other => other,
                    };
                    let ping_flood = attack == Attack::Stallers && k % 2 == 0;
                    let held = match kind {
                        Attack::WindowZero | Attack::Trickle | Attack::HeldStreams => {
                            h2_client(&target, kind, &stop, &counts).await
                        }
                        Attack::Pipeline => pipeline(&target, &stop, &counts).await,
                        Attack::HeaderBlocks => header_block(&target, &stop, &counts).await,
                        Attack::WindowUpdates => flood(&target, ping_flood, &stop, &counts).await,
                        Attack::Stallers => unreachable!(),
                    };
                    if !held {
                        counts.refused.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(RECONNECT).await;
                }
            })
        })
        .collect()
}

/// Waits until `stop` (true) or `closed` resolves (false).
async fn hold(stop: &AtomicBool, closed: impl std::future::Future) -> bool {
    tokio::pin!(closed);
    loop {
        tokio::select! {
            _ = &mut closed => return false,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                if stop.load(Ordering::Relaxed) {
                    return true;
                }
            }
        }
    }
}

/// The HTTP/2 attacks a client library speaks: [`Attack::WindowZero`],
/// [`Attack::Trickle`], [`Attack::HeldStreams`]. Whether the connection
/// was opened.
async fn h2_client(t: &Target, attack: Attack, stop: &AtomicBool, counts: &Arc<Counts>) -> bool {
    let Some(stream) = tls(t, &t.h2, None).await else {
        return false;
    };
    let window = if attack == Attack::WindowZero {
        0
    } else {
        65_535
    };
    let Ok((client, conn)) = h2::client::Builder::new()
        .initial_window_size(window)
        .handshake::<_, Bytes>(stream)
        .await
    else {
        return false;
    };
    counts.connected.fetch_add(1, Ordering::Relaxed);
    let driver = tokio::spawn(conn);
    // Every stream the server allows, each opened again when it ends.
    let streams: Vec<_> = (0..16)
        .map(|_| {
            let client = client.clone();
            let big = t.big.clone();
            let counts = counts.clone();
            async move {
                loop {
                    let Ok(mut c) = client.clone().ready().await else {
                        return;
                    };
                    let mut req =
                        Request::post("/mutate").header("content-type", "application/json");
                    req = match attack {
                        Attack::WindowZero => req.header("content-length", big.len()),
                        Attack::Trickle => req.header("content-length", 200_000),
                        _ => req,
                    };
                    let Ok((resp, mut send)) = c.send_request(req.body(()).unwrap(), false) else {
                        return;
                    };
                    match attack {
                        Attack::WindowZero => {
                            let _ = send.send_data(big.clone(), true);
                        }
                        Attack::Trickle => {
                            let _ = send.send_data(Bytes::from(vec![b' '; 65_536]), false);
                        }
                        _ => {}
                    }
                    let trickle = async {
                        loop {
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            if attack == Attack::Trickle
                                && send.send_data(Bytes::from_static(b" "), false).is_err()
                            {
                                return;
                            }
                        }
                    };
                    let resp = tokio::select! {
                        r = resp => r,
                        () = trickle => return,
                    };
                    let Ok(resp) = resp else {
                        return;
                    };
                    if resp.status().is_success() {
                        counts.answered.fetch_add(1, Ordering::Relaxed);
                    } else {
                        counts.turned_away.fetch_add(1, Ordering::Relaxed);
                    }
                    if attack == Attack::WindowZero {
                        // The answer is kept, never read: the stream holds
                        // until the server gives up on it.
                        let _ = resp.into_body().data().await;
                        drop(send);
                    }
                }
            }
        })
        .map(tokio::spawn)
        .collect();
    hold(stop, driver).await;
    for s in streams {
        s.abort();
    }
    true
}

/// [`Attack::Pipeline`]: requests for the largest answer, pipelined until
/// the server stops reading, never read; then held until closed.
async fn pipeline(t: &Target, stop: &AtomicBool, counts: &Counts) -> bool {
    let Some(mut stream) = tls(t, &t.h1, Some(4096)).await else {
        return false;
    };
    counts.connected.fetch_add(1, Ordering::Relaxed);
    let mut request = format!(
        "POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        t.big.len()
    )
    .into_bytes();
    request.extend_from_slice(&t.big);
    while !stop.load(Ordering::Relaxed) {
        match tokio::time::timeout(Duration::from_secs(1), stream.write_all(&request)).await {
            Ok(Ok(())) => continue,
            Ok(Err(_)) => return true,
            Err(_) => break,
        }
    }
    // Holds; a write fails once the server has closed it.
    hold(stop, async {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if let Ok(Err(_)) =
                tokio::time::timeout(Duration::from_millis(100), stream.write_all(b"x")).await
            {
                return;
            }
        }
    })
    .await;
    true
}

/// [`Attack::HeaderBlocks`]: an 80 KiB header block that never ends.
async fn header_block(t: &Target, stop: &AtomicBool, counts: &Counts) -> bool {
    let Some(mut stream) = tls(t, &t.h2, None).await else {
        return false;
    };
    counts.connected.fetch_add(1, Ordering::Relaxed);
    let mut out = preface();
    out.extend(frame(1, 0, 1, &unfinished_block(16_384 - 5)));
    for _ in 0..4 {
        out.extend(frame(9, 0, 1, &[b'a'; 16_384]));
    }
    if stream.write_all(&out).await.is_err() {
        return true;
    }
    let mut buf = vec![0u8; 4096];
    hold(stop, async {
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                return;
            }
        }
    })
    .await;
    true
}

/// [`Attack::WindowUpdates`] (or, with `pings`, a PING flood that never
/// reads: a stalled writer): control frames written as fast as the server
/// takes them.
async fn flood(t: &Target, pings: bool, stop: &AtomicBool, counts: &Counts) -> bool {
    let Some(mut stream) = tls(t, &t.h2, pings.then_some(4096)).await else {
        return false;
    };
    counts.connected.fetch_add(1, Ordering::Relaxed);
    let mut out = preface();
    if !pings {
        // A stream whose body never comes: open for the read timeout.
        out.extend(frame(1, 0x4, 1, &post_mutate_headers()));
    }
    if stream.write_all(&out).await.is_err() {
        return true;
    }
    let burst: Vec<u8> = (0..4096u64)
        .flat_map(|i| {
            if pings {
                frame(6, 0, 0, &i.to_be_bytes())
            } else {
                frame(8, 0, 1, &1u32.to_be_bytes())
            }
        })
        .collect();
    let (mut reader, mut writer) = tokio::io::split(stream);
    // Whatever the server sends is read (and dropped) by the WINDOW_UPDATE
    // flooder, whose attack is the flood alone; the PING flooder reads
    // nothing.
    let drain = (!pings).then(|| {
        tokio::spawn(async move {
            let mut buf = vec![0u8; 16_384];
            while let Ok(n) = reader.read(&mut buf).await {
                if n == 0 {
                    return;
                }
            }
        })
    });
    while !stop.load(Ordering::Relaxed) {
        match tokio::time::timeout(Duration::from_millis(500), writer.write_all(&burst)).await {
            Ok(Ok(())) | Err(_) => {}
            Ok(Err(_)) => break,
        }
    }
    if let Some(d) = drain {
        d.abort();
    }
    true
}
