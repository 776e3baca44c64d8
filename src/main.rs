use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};
use dljob::args::{Cli, Command};
use dljob::offline;

/// Every review parses a JSON object into many small allocations; mimalloc
/// serves them markedly faster than glibc's malloc (BENCHMARKS.md).
#[cfg(not(feature = "dhat-heap"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (`mimalloc.h`, the same in its v2 and
/// v3; the binding names its neighbours 14 and 16 but not it).
#[cfg(not(feature = "dhat-heap"))]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed memory goes back to the system at once instead of after a second
/// (mimalloc v3's default, `options.c`):
/// the reconciler's bursts (a LIST of 10 000 pods, a reconcile of every
/// job) otherwise leave tens of MiB of freed pages in RSS; the webhook's
/// CPU per review does not change (BENCHMARKS.md, both measured).
#[cfg(not(feature = "dhat-heap"))]
#[allow(unsafe_code, reason = "mimalloc's option setter is a C function")]
fn tune_allocator() {
    // SAFETY: sets one integer option, before any thread but this one
    // exists; mimalloc documents purge_delay 0 as "purge immediately".
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}

/// `--features dhat-heap`: every allocation is recorded by dhat (slow) and
/// `dhat-heap.json` is written to the working directory when `main`
/// returns (after `serve` has stopped on SIGTERM), or as soon as the file
/// named by `DLJOB_DHAT_TRIGGER` exists: the live heap of a running server
/// (benches/replay.rs).
#[cfg(feature = "dhat-heap")]
#[global_allocator]
static GLOBAL: dhat::Alloc = dhat::Alloc;

#[cfg(feature = "dhat-heap")]
static PROFILER: std::sync::Mutex<Option<dhat::Profiler>> = std::sync::Mutex::new(None);

#[cfg(feature = "dhat-heap")]
fn profile_heap() {
    // Deep enough to reach the reconciler's frames under tokio and kube.
    let profiler = dhat::Profiler::builder().trim_backtraces(Some(100)).build();
    *PROFILER.lock().unwrap_or_else(|e| e.into_inner()) = Some(profiler);
    if let Some(trigger) = std::env::var_os("DLJOB_DHAT_TRIGGER") {
        std::thread::spawn(move || loop {
            if std::path::Path::new(&trigger).exists() {
                drop(PROFILER.lock().unwrap_or_else(|e| e.into_inner()).take());
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        });
    }
}

fn main() -> ExitCode {
    #[cfg(not(feature = "dhat-heap"))]
    tune_allocator();
    #[cfg(feature = "dhat-heap")]
    profile_heap();
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        eprintln!("error: a rustls crypto provider was already installed");
        return ExitCode::from(2);
    }
    let result = match &parse().command {
        Command::Serve(args) => dljob::serve::serve(args),
        Command::Mutate(args) => offline::mutate(args),
        Command::Validate(args) => offline::validate(args),
        Command::Label(args) => offline::label(args),
        Command::Convert(args) => offline::convert(args),
        Command::Crd => dljob::crd::print(),
        Command::Certs(args) => dljob::install::certs(args),
        Command::WebhookConfig(args) => dljob::install::webhook_config(args),
        Command::Rbac(args) => dljob::install::rbac(args),
        Command::Logs(args) => dljob::inspect::logs(args),
        Command::Describe(args) => dljob::inspect::describe::run(args),
        Command::WaitForNames(args) => dljob::wait_names::run(args),
    };
    // Errors print their cause chain, never a backtrace: they are meant for
    // the user, whatever RUST_BACKTRACE says.
    let code = result.unwrap_or_else(|e| {
        eprintln!("error: {}", dljob::telemetry::Chain(e.as_ref()));
        ExitCode::from(2)
    });
    #[cfg(feature = "dhat-heap")]
    drop(PROFILER.lock().unwrap_or_else(|e| e.into_inner()).take());
    code
}

/// The command line. Installed as `kubectl-dljob` (kubectl's plugin
/// convention), the binary runs as `kubectl dljob …` and says so in its
/// usage lines.
fn parse() -> Cli {
    let plugin = std::env::args_os().next().is_some_and(|arg0| {
        std::path::Path::new(&arg0)
            .file_stem()
            .is_some_and(|name| name == "kubectl-dljob")
    });
    if !plugin {
        return Cli::parse();
    }
    let matches = Cli::command().bin_name("kubectl dljob").get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

#[cfg(all(test, not(feature = "dhat-heap")))]
mod tests {
    use super::*;

    /// Option 15 is purge_delay: its default is 1000 (ms, mimalloc v3's
    /// `options.c`), unless the environment says otherwise; after tuning
    /// it is 0.
    #[test]
    #[allow(unsafe_code, reason = "mimalloc's option getter is a C function")]
    fn the_purge_delay_option_is_the_one_set() {
        let get = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        let from_env = std::env::var("MIMALLOC_PURGE_DELAY").ok();
        assert_eq!(
            get().to_string(),
            from_env.unwrap_or_else(|| "1000".to_owned())
        );
        tune_allocator();
        assert_eq!(get(), 0);
    }
}
