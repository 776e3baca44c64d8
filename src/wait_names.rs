//! `dljob wait-for-names`: what the init container
//! [`c::WAIT_FOR_NAMES_CONTAINER`] runs, from dljob's own image, before a
//! member's framework starts. It waits until each name resolves, as the
//! framework's own lookups resolve it (the C library's `getaddrinfo`: the
//! pod's /etc/hosts, then the cluster's DNS with the pod's search path),
//! bounded by `--timeout`.
//!
//! It needs nothing of the framework's image (no shell, no `getent`): the
//! binary is static, and glibc's `files` and `dns` lookups are built into it,
//! so it resolves in an image that holds nothing else but the
//! `/etc/nsswitch.conf` that says files first (checked by `.ci/image` in the
//! shipped image, against a DNS server that answers). A lookup under way
//! ends within the resolver's own timeout before the bound is looked at.
//!
//! Whatever happens it exits 0 once it stops waiting: the framework then
//! starts, as it would without the step. A wait that gave up is written to
//! the container's termination message (`/dev/termination-log`, which the
//! kubelet mounts), where the reconciler reads it for the DLJob's
//! `NameWaitFailed` condition and Event.

use std::net::ToSocketAddrs;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ContainerStatus;

use crate::args::WaitForNamesArgs;
use crate::contract as c;

/// The longest pause between two lookups of one name.
const MAX_PAUSE: Duration = Duration::from_secs(5);
/// How often a wait still going on says so in the log.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// What the wait needs from the world: lookups and time.
pub trait World {
    /// Resolves `name`; on failure, the resolver's words.
    fn resolve(&mut self, name: &str) -> Result<(), String>;
    /// Time since the wait started.
    fn elapsed(&self) -> Duration;
    fn sleep(&mut self, pause: Duration);
}

/// The real world: `getaddrinfo`, the monotonic clock, `thread::sleep`.
struct Real(Instant);

impl World for Real {
    fn resolve(&mut self, name: &str) -> Result<(), String> {
        match (name, 0).to_socket_addrs() {
            Ok(addrs) if addrs.len() > 0 => Ok(()),
            Ok(_) => Err("no address".to_owned()),
            Err(e) => Err(e
                .to_string()
                .trim_start_matches("failed to lookup address information: ")
                .to_owned()),
        }
    }
    fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
    fn sleep(&mut self, pause: Duration) {
        std::thread::sleep(pause);
    }
}

/// How a wait ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every name resolved.
    Resolved,
    /// `name` did not resolve within the bound (the last lookup's error).
    GaveUp {
        name: String,
        waited: Duration,
        error: String,
    },
}

/// Waits for each of `names` in turn, within `limit` in all; every line it
/// says goes to `say` (the log). A name is looked up again after 1 s, then
/// one more second each time, up to [`MAX_PAUSE`].
pub fn wait(
    world: &mut impl World,
    names: &[String],
    limit: Duration,
    say: &mut impl FnMut(String),
) -> Outcome {
    for name in names {
        let mut pause = Duration::from_secs(1);
        let mut said = Duration::ZERO;
        loop {
            let error = match world.resolve(name) {
                Ok(()) => {
                    say(format!(
                        "dljob: {name} resolves (waited {}s)",
                        world.elapsed().as_secs()
                    ));
                    break;
                }
                Err(error) => error,
            };
            let waited = world.elapsed();
            if waited >= limit {
                return Outcome::GaveUp {
                    name: name.clone(),
                    waited,
                    error,
                };
            }
            if waited >= said + PROGRESS_EVERY {
                said = waited;
                say(format!(
                    "dljob: waiting for {name} to resolve ({}s of at most {}s): {error}",
                    waited.as_secs(),
                    limit.as_secs()
                ));
            }
            world.sleep(pause.min(limit - waited));
            pause = (pause + Duration::from_secs(1)).min(MAX_PAUSE);
        }
    }
    Outcome::Resolved
}

/// The sentence of a wait that gave up: the log's and the termination
/// message's (which starts with [`c::NAME_WAIT_GAVE_UP`]).
pub fn gave_up_message(
    name: &str,
    waited: Duration,
    error: &str,
    service: Option<(&str, &str)>,
) -> String {
    let check = match service {
        Some((namespace, service)) => format!(
            "is the Service there (kubectl get service -n {namespace} {service}), is dljob's reconciler running, is that pod scheduled?"
        ),
        None => "is the job's headless Service there, is dljob's reconciler running, is that pod scheduled?".to_owned(),
    };
    format!(
        "{} after {}s: {name} does not resolve ({error}); the framework starts anyway and may fail to reach it. The job's headless Service publishes the name once that pod has an address: {check}",
        c::NAME_WAIT_GAVE_UP,
        waited.as_secs()
    )
}

/// Writes the termination message, only where the file is there (the
/// kubelet mounts it in a container; outside one nothing is created).
fn write_termination_message(path: &Path, message: &str) {
    let written = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, message.as_bytes()));
    if let Err(e) = written {
        if e.kind() != std::io::ErrorKind::NotFound {
            eprintln!(
                "dljob: could not write the termination message to {}: {e}",
                path.display()
            );
        }
    }
}

/// What went wrong with a pod's name wait, read from the status of its
/// init container [`c::WAIT_FOR_NAMES_CONTAINER`], in a few words that stay
/// the same while it stays wrong (so that the reconciler's `NameWaitFailed`
/// condition and Event do not change with every retry of the kubelet's):
///
/// - it gave up: its termination message, which begins with
///   [`c::NAME_WAIT_GAVE_UP`], up to the first `;` (which name, after how
///   long, and why);
/// - it cannot run: an exit other than 0, now or in its last run (a wait
///   the kubelet restarts, running or backing off again), with its reason
///   and termination message; its image cannot be pulled (`ErrImagePull`
///   and `ImagePullBackOff` alike, without the kubelet's message, which
///   changes as it retries: `kubectl describe pod` shows it); or its
///   container cannot be made.
///
/// None while it waits and once it found its names. `dljob describe` says
/// it too.
pub fn problem(status: &ContainerStatus) -> Option<String> {
    let state = status.state.as_ref()?;
    if let Some(t) = state.terminated.as_ref().filter(|t| t.exit_code == 0) {
        let message = t.message.as_deref().unwrap_or("").trim();
        let gave_up = message.strip_prefix(c::NAME_WAIT_GAVE_UP)?;
        let what = gave_up.split(';').next().unwrap_or(gave_up).trim_start();
        return Some(format!("gave up {what}"));
    }
    let failed = std::iter::once(state)
        .chain(status.last_state.as_ref())
        .find_map(|s| s.terminated.as_ref().filter(|t| t.exit_code != 0));
    if let Some(t) = failed {
        let reason = t.reason.as_deref().unwrap_or("Error");
        let message = t.message.as_deref().unwrap_or("").trim();
        return Some(if message.is_empty() {
            format!("cannot run: it exited {} ({reason})", t.exit_code)
        } else {
            format!(
                "cannot run: it exited {} ({reason}: {message})",
                t.exit_code
            )
        });
    }
    match state.waiting.as_ref()?.reason.as_deref()? {
        "ErrImagePull" | "ImagePullBackOff" | "ErrImageNeverPull" | "InvalidImageName" => Some(
            format!("cannot run: its image {} cannot be pulled", status.image),
        ),
        reason @ ("CreateContainerConfigError" | "CreateContainerError" | "RunContainerError") => {
            Some(format!("cannot run: {reason}"))
        }
        _ => None,
    }
}

/// `dljob wait-for-names`.
pub fn run(args: &WaitForNamesArgs) -> anyhow::Result<ExitCode> {
    let mut world = Real(Instant::now());
    let limit = Duration::from_secs(u64::from(args.timeout));
    let outcome = wait(&mut world, &args.names, limit, &mut |line| {
        println!("{line}");
    });
    if let Outcome::GaveUp {
        name,
        waited,
        error,
    } = outcome
    {
        let service = args.namespace.as_deref().zip(args.service.as_deref());
        let message = gave_up_message(&name, waited, &error, service);
        eprintln!("{message}");
        write_termination_message(&args.termination_log, &message);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A resolver whose names appear at given seconds, on a clock that
    /// moves only when the wait sleeps.
    struct Fake {
        now: Duration,
        appear: Vec<(&'static str, Duration)>,
        lookups: Vec<(String, u64)>,
    }

    impl World for Fake {
        fn resolve(&mut self, name: &str) -> Result<(), String> {
            self.lookups.push((name.to_owned(), self.now.as_secs()));
            match self.appear.iter().find(|(n, _)| *n == name) {
                Some((_, at)) if *at <= self.now => Ok(()),
                _ => Err("Name or service not known".to_owned()),
            }
        }
        fn elapsed(&self) -> Duration {
            self.now
        }
        fn sleep(&mut self, pause: Duration) {
            self.now += pause;
        }
    }

    /// Waits for `names`, bounded by `limit` seconds, where each name of
    /// `appear` resolves from its second on: the outcome, the lookups made
    /// (name, second) and the lines said.
    fn waited(
        appear: Vec<(&'static str, u64)>,
        names: &[&str],
        limit: u64,
    ) -> (Outcome, Vec<(String, u64)>, Vec<String>) {
        let mut fake = Fake {
            now: Duration::ZERO,
            appear: appear
                .into_iter()
                .map(|(n, at)| (n, Duration::from_secs(at)))
                .collect(),
            lookups: Vec::new(),
        };
        let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let mut said = Vec::new();
        let outcome = wait(&mut fake, &names, Duration::from_secs(limit), &mut |l| {
            said.push(l);
        });
        (outcome, fake.lookups, said)
    }

    #[test]
    fn waits_for_each_name_in_turn_backing_off_to_five_seconds() {
        let (outcome, lookups, said) = waited(vec![("a", 17), ("b", 0)], &["a", "b"], 600);
        assert_eq!(outcome, Outcome::Resolved);
        // Pauses 1, 2, 3, 4, 5, 5: looked up at 0, 1, 3, 6, 10, 15, 20.
        let at: Vec<u64> = lookups
            .iter()
            .filter(|(n, _)| n == "a")
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(at, [0, 1, 3, 6, 10, 15, 20]);
        assert_eq!(
            said,
            [
                "dljob: a resolves (waited 20s)",
                "dljob: b resolves (waited 20s)"
            ]
        );
    }

    #[test]
    fn gives_up_at_the_bound_saying_so_every_thirty_seconds() {
        let (outcome, lookups, said) = waited(vec![("a", 0)], &["a", "never"], 62);
        assert_eq!(
            outcome,
            Outcome::GaveUp {
                name: "never".to_owned(),
                waited: Duration::from_secs(62),
                error: "Name or service not known".to_owned(),
            }
        );
        // The last pause is cut to the bound: the last lookup is at 62 s.
        assert_eq!(lookups.last(), Some(&("never".to_owned(), 62)));
        assert_eq!(
            said,
            [
                "dljob: a resolves (waited 0s)",
                "dljob: waiting for never to resolve (30s of at most 62s): Name or service not known",
                "dljob: waiting for never to resolve (60s of at most 62s): Name or service not known",
            ]
        );
    }

    #[test]
    fn a_zero_bound_looks_once() {
        let (outcome, lookups, _) = waited(vec![], &["x"], 0);
        assert!(matches!(outcome, Outcome::GaveUp { .. }));
        assert_eq!(lookups.len(), 1);
    }

    #[test]
    fn the_message_names_the_service_to_check() {
        let m = gave_up_message(
            "xg-master-0.xg.ml.svc",
            Duration::from_secs(600),
            "Name or service not known",
            Some(("ml", "xg")),
        );
        assert!(m.starts_with(c::NAME_WAIT_GAVE_UP), "{m}");
        assert!(
            m.contains(
                "after 600s: xg-master-0.xg.ml.svc does not resolve (Name or service not known)"
            ),
            "{m}"
        );
        assert!(m.contains("kubectl get service -n ml xg"), "{m}");
    }

    #[test]
    fn the_termination_message_is_written_only_where_the_file_is() {
        let dir = std::env::temp_dir().join(format!("dljob-wait-names-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let there = dir.join("termination-log");
        std::fs::write(&there, "old and longer").unwrap();
        write_termination_message(&there, "new");
        assert_eq!(std::fs::read_to_string(&there).unwrap(), "new");
        let absent = dir.join("absent");
        write_termination_message(&absent, "x");
        assert!(!absent.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_real_resolver_reads_the_hosts_file() {
        // The machine's /etc/hosts answers; no query leaves it (the
        // conformance tier runs the lookups that fail, in a sandbox whose
        // resolver is a closed port).
        let mut real = Real(Instant::now());
        assert_eq!(real.resolve("localhost"), Ok(()));
    }
}
