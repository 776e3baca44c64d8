//! The `dljob serve` a bench starts as a child: a free address for it,
//! the wait until it listens, and what /proc says of its memory and CPU.
//! Shared by benches/load.rs and benches/replay.rs (Linux only).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// A free port on 127.0.0.1 (closed again just before the child binds).
pub(crate) fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
}

/// Waits until `child` has written its self-signed CA to `ca` and accepts
/// connections on `addr`; returns the CA's PEM. Panics with `log()` (the
/// child's log, as the caller shows it) if it exits or `within` passes.
pub(crate) fn wait_listening(
    child: &mut Child,
    ca: &Path,
    addr: SocketAddr,
    within: Duration,
    log: impl Fn() -> String,
) -> String {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the server exited ({status}); its log:\n{}", log());
        }
        let pem = std::fs::read_to_string(ca).unwrap_or_default();
        if pem.contains("END CERTIFICATE") && std::net::TcpStream::connect(addr).is_ok() {
            return pem;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not listen in {within:?}; its log:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// (VmRSS, VmHWM) in KiB of process `pid`.
pub(crate) fn memory(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// CPU seconds (user + system) process `pid` has used.
#[allow(unsafe_code, reason = "sysconf is a C function")]
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's ")": state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks as f64 / per_second.max(1) as f64)
}
