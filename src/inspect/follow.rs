//! `dljob logs -f`: following every pod's log as lines arrive, new pods
//! and restarted containers included.
//!
//! [`Tracker`] decides, event by event, which streams to open (pure);
//! [`follow`] feeds it the pod watch and the streams that end, opens the
//! streams it asks for and prints their lines (I/O).

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, LogParams};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::ResourceExt;
use tokio::sync::mpsc;

use super::logs::{first_read, job_pods, read_stream, Format, Msg, STREAM_BUFFER};
use super::replica::{self, ReplicaOrder, ReplicaPod};
use crate::args::LogsArgs;

/// The longest wait before a follow stream that keeps ending is reopened.
const MAX_REOPEN_DELAY: Duration = Duration::from_secs(30);

/// A log stream `-f` opens.
#[derive(Clone, Debug)]
pub(crate) struct Open {
    pub uid: String,
    pub replica: ReplicaPod,
    pub container: String,
    pub params: LogParams,
    /// Wait this long first (a stream reopened after it ended).
    pub delay: Duration,
}

/// What `-f` does next.
#[derive(Clone, Debug)]
pub(crate) enum Step {
    Open(Box<Open>),
    /// A line for standard error.
    Notice(String),
}

/// One pod `-f` knows.
#[derive(Debug)]
struct Tracked {
    replica: ReplicaPod,
    /// Listed when the command started: its first read takes --tail/--since.
    initial: bool,
    deleted: bool,
    /// Seen again since the watch last restarted.
    relisted: bool,
    has_run: bool,
    running: bool,
    /// The container run the pod shows ([`replica::run_of`]).
    run: Option<String>,
    /// Why it has no logs yet, when it has not run.
    not_started: String,
    /// The run the last stream was opened for; None: never opened.
    followed: Option<Option<String>>,
    active: bool,
    /// Reopen from this time: the stream ended while the container runs.
    reopen: Option<Timestamp>,
    /// Streams in a row that ended without a line (the reopen backoff).
    quiet_ends: u32,
    told_pending: bool,
    told_waiting: bool,
    told_no_container: bool,
}

/// What `dljob logs -f` follows, decided from the pods the watch reports
/// and the streams that end. Pure: the caller opens the streams.
///
/// A pod's framework container is followed once it has run; when its run
/// changes (the kubelet restarted it) the new run is followed, and a new pod
/// (a recreated replica: same `role-index`, new uid) is followed from its
/// first line. A stream that ends while its container still runs (the
/// connection dropped) is reopened from the time it ended, after a delay
/// that doubles while reopened streams bring nothing. At most `max` streams
/// are open at once.
#[derive(Debug)]
pub(crate) struct Tracker {
    pods: BTreeMap<String, Tracked>,
    max: usize,
    active: usize,
    tail: Option<u64>,
    since: Option<Duration>,
    /// Replicas (`role-index`) a stream was ever opened for.
    followed_replicas: HashSet<String>,
    /// The container `-c` asked for instead of the framework container.
    container: Option<String>,
}

impl Tracker {
    pub(crate) fn new(max: usize, tail: Option<u64>, since: Option<Duration>) -> Self {
        Self {
            pods: BTreeMap::new(),
            max: max.max(1),
            active: 0,
            tail,
            since,
            followed_replicas: HashSet::new(),
            container: None,
        }
    }

    /// Follows `container` of every pod instead of its framework
    /// container (`dljob logs -f -c NAME`).
    pub(crate) fn reading(mut self, container: Option<String>) -> Self {
        self.container = container;
        self
    }

    /// Open streams.
    #[cfg(test)]
    fn active(&self) -> usize {
        self.active
    }

    /// A pod was listed or changed; `initial` when listed at the start.
    pub(crate) fn seen(&mut self, pod: &Pod, initial: bool) {
        let Some(uid) = pod.uid() else { return };
        let replica = ReplicaPod::of(pod).reading(pod, self.container.as_deref());
        let status = replica::container_status(pod, replica.container.as_deref());
        let not_started = replica::not_started(pod, replica.container.as_deref());
        let (has_run, running, run) = match status {
            Some(s) => (
                replica::has_run(s),
                replica::is_running(s),
                replica::run_of(s),
            ),
            None => (false, false, None),
        };
        let deleting = pod.metadata.deletion_timestamp.is_some();
        let t = self.pods.entry(uid).or_insert_with(|| Tracked {
            replica: replica.clone(),
            initial,
            deleted: false,
            relisted: true,
            has_run,
            running,
            run: run.clone(),
            not_started: not_started.clone(),
            followed: None,
            active: false,
            reopen: None,
            quiet_ends: 0,
            told_pending: false,
            told_waiting: false,
            told_no_container: false,
        });
        t.replica = replica;
        t.has_run = has_run;
        t.running = running && !deleting;
        t.run = run;
        t.not_started = not_started;
        t.relisted = true;
    }

    /// A pod is gone.
    pub(crate) fn deleted(&mut self, uid: &str) {
        if let Some(t) = self.pods.get_mut(uid) {
            t.deleted = true;
            t.reopen = None;
            if !t.active {
                self.pods.remove(uid);
            }
        }
    }

    /// The watch restarted: the pods it lists again follow.
    pub(crate) fn relist_started(&mut self) {
        for t in self.pods.values_mut() {
            t.relisted = false;
        }
    }

    /// The watch listed every pod: the ones it did not list are gone.
    pub(crate) fn relist_done(&mut self) {
        let gone: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, t)| !t.relisted)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in gone {
            self.deleted(&uid);
        }
    }

    /// What the pod watch reported.
    pub(crate) fn watched(&mut self, event: watcher::Event<Pod>) {
        match event {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => self.seen(&p, false),
            watcher::Event::Delete(p) => self.deleted(&p.uid().unwrap_or_default()),
            watcher::Event::Init => self.relist_started(),
            watcher::Event::InitDone => self.relist_done(),
        }
    }

    /// A stream ended at `now` after `lines` lines.
    pub(crate) fn ended(&mut self, uid: &str, lines: u64, now: Timestamp) {
        let Some(t) = self.pods.get_mut(uid) else {
            return;
        };
        if t.active {
            t.active = false;
            self.active -= 1;
        }
        if t.deleted {
            self.pods.remove(uid);
            return;
        }
        t.quiet_ends = if lines == 0 { t.quiet_ends + 1 } else { 0 };
        // Still the run the stream followed, and still running: the
        // connection ended, not the container.
        if t.running && t.followed.as_ref() == Some(&t.run) {
            t.reopen = Some(now);
        }
    }

    /// The streams to open now and what to tell the user, in replica order.
    pub(crate) fn steps(&mut self) -> Vec<Step> {
        let order = ReplicaOrder::of_pods(self.pods.values().map(|t| &t.replica));
        let mut uids: Vec<&String> = self.pods.keys().collect();
        uids.sort_by(|a, b| {
            order
                .key(&self.pods[*a].replica)
                .cmp(&order.key(&self.pods[*b].replica))
        });
        let uids: Vec<String> = uids.into_iter().cloned().collect();
        let mut steps = Vec::new();
        for uid in uids {
            let Some(t) = self.pods.get_mut(&uid) else {
                continue;
            };
            if t.active || t.deleted {
                continue;
            }
            let label = t.replica.label();
            let pod = t.replica.name.clone();
            let Some(container) = t.replica.container.clone() else {
                if !t.told_no_container {
                    t.told_no_container = true;
                    steps.push(Step::Notice(
                        t.replica.no_container(self.container.as_deref()),
                    ));
                }
                continue;
            };
            let due = match &t.followed {
                None => t.has_run,
                Some(followed) => t.reopen.is_some() || (t.run.is_some() && &t.run != followed),
            };
            if !due {
                if t.followed.is_none() && !t.told_pending {
                    t.told_pending = true;
                    steps.push(Step::Notice(format!(
                        "{label}: pod {pod} is {}; following it once it starts",
                        t.not_started
                    )));
                }
                continue;
            }
            if self.active >= self.max {
                if !t.told_waiting {
                    t.told_waiting = true;
                    steps.push(Step::Notice(format!(
                        "{label}: waiting for a free log stream (--max-streams {})",
                        self.max
                    )));
                }
                continue;
            }
            let (params, delay) = match (&t.followed, t.reopen) {
                (None, _) if t.initial => (
                    first_read(&container, self.tail, self.since, true),
                    Duration::ZERO,
                ),
                (_, Some(from)) => (
                    LogParams {
                        container: Some(container.clone()),
                        follow: true,
                        since_time: Some(from),
                        ..LogParams::default()
                    },
                    reopen_delay(t.quiet_ends),
                ),
                _ => (first_read(&container, None, None, true), Duration::ZERO),
            };
            if t.reopen.is_none() {
                if t.followed.is_some() {
                    steps.push(Step::Notice(format!(
                        "{label}: container {container} of pod {pod} restarted; following its new run"
                    )));
                } else if self.followed_replicas.contains(&label) {
                    steps.push(Step::Notice(format!(
                        "{label}: following the new pod {pod}"
                    )));
                }
            }
            t.followed = Some(t.run.clone());
            t.reopen = None;
            t.active = true;
            t.told_waiting = false;
            self.active += 1;
            self.followed_replicas.insert(label);
            steps.push(Step::Open(Box::new(Open {
                uid,
                replica: t.replica.clone(),
                container,
                params,
                delay,
            })));
        }
        steps
    }
}

/// 1 s, doubling with every quiet end before it, at most 30 s.
fn reopen_delay(quiet_ends: u32) -> Duration {
    Duration::from_secs(1u64 << quiet_ends.min(5)).min(MAX_REOPEN_DELAY)
}

// ---- I/O -------------------------------------------------------------------

/// Opens one stream in its own task: its lines go to `lines`, its end
/// (uid, lines read) to `ends`.
fn spawn_stream(
    open: Open,
    api: &Api<Pod>,
    format: &Arc<Format>,
    lines: &mpsc::Sender<Msg>,
    ends: &mpsc::UnboundedSender<(String, u64)>,
) {
    let (api, format, lines, ends) = (api.clone(), format.clone(), lines.clone(), ends.clone());
    tokio::spawn(async move {
        tokio::time::sleep(open.delay).await;
        let src = format.source(&open.replica, &open.container);
        let pod = &open.replica.name;
        let (n, error) = read_stream(&api, pod, &open.params, &format, &src, &lines).await;
        if let Some(e) = error {
            let why = format!("{}: cannot follow the log of pod {pod}: {e}", src.label);
            let _ = lines.send(Msg::Notice(why)).await;
        }
        let _ = ends.send((open.uid, n));
    });
}

/// Follows every pod's log until `shutdown`: lines are printed as they
/// arrive (whole lines, never split), new pods and restarted containers
/// are followed as the pod watch reports them.
pub async fn follow(
    client: &kube::Client,
    ns: &str,
    args: &LogsArgs,
    colour: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<ExitCode> {
    let pods = job_pods(client, ns, args, err).await?;
    let max = usize::from(args.max_streams);
    if pods.len() > max {
        let (job, n) = (&args.job, pods.len());
        anyhow::bail!(
            "following job {job:?} takes {n} log streams, more than --max-streams {max}: \
             pass --max-streams {n}, or follow one role with --role"
        );
    }
    let replicas: Vec<ReplicaPod> = pods
        .iter()
        .map(|p| ReplicaPod::of(p).reading(p, args.container.as_deref()))
        .collect();
    let format = Arc::new(Format::new(&args.job, args.output, colour, &replicas));
    let mut tracker = Tracker::new(max, args.tail, args.since).reading(args.container.clone());
    for p in &pods {
        tracker.seen(p, true);
    }
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let selector = super::pod_selector(&args.job, args.role.as_deref());
    let watch =
        watcher(api.clone(), watcher::Config::default().labels(&selector)).default_backoff();
    let mut watch = std::pin::pin!(watch);
    let mut shutdown = std::pin::pin!(shutdown);
    let (line_tx, mut lines) = mpsc::channel::<Msg>(STREAM_BUFFER);
    let (end_tx, mut ends) = mpsc::unbounded_channel::<(String, u64)>();
    let mut watch_failing = false;
    loop {
        for step in tracker.steps() {
            match step {
                Step::Notice(n) => {
                    out.flush()?;
                    writeln!(err, "{n}")?;
                }
                Step::Open(open) => spawn_stream(*open, &api, &format, &line_tx, &end_tx),
            }
        }
        out.flush()?;
        tokio::select! {
            () = &mut shutdown => break,
            Some(msg) = lines.recv() => {
                // Print what is there, then flush once.
                let mut next = Some(msg);
                while let Some(msg) = next {
                    match msg {
                        Msg::Line(line) => out.write_all(line.as_bytes())?,
                        Msg::Notice(n) | Msg::Failed(n) => {
                            out.flush()?;
                            writeln!(err, "{n}")?;
                        }
                    }
                    next = lines.try_recv().ok();
                }
            }
            Some((uid, n)) = ends.recv() => tracker.ended(&uid, n, Timestamp::now()),
            event = watch.next() => match event {
                Some(Ok(event)) => {
                    watch_failing = false;
                    tracker.watched(event);
                }
                Some(Err(e)) if !watch_failing => {
                    watch_failing = true;
                    let job = &args.job;
                    writeln!(err, "watching the pods of job {job:?} failed: {e}; retrying")?;
                }
                Some(Err(_)) => {}
                None => break,
            },
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, uid: &str, state: serde_json::Value, restarts: i32) -> Pod {
        let phase = if state.get("waiting").is_some() && restarts == 0 {
            "Pending"
        } else {
            "Running"
        };
        serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": "ml", "uid": uid,
                "labels": {"dljob.dev/job": "tf", "dljob.dev/role": "worker"},
                "annotations": {"dljob.dev/framework": "tensorflow", "dljob.dev/replicas": "worker=2",
                                "dljob.dev/index": name.rsplit('-').next().unwrap()}
            },
            "spec": {"nodeName": "n1", "hostname": name,
                     "containers": [{"name": "tensorflow"}]},
            "status": {"phase": phase, "containerStatuses": [
                {"name": "tensorflow", "image": "", "imageID": "", "ready": true,
                 "restartCount": restarts, "state": state}]}
        }))
        .unwrap()
    }

    /// A pod whose framework container runs as container `id`.
    fn running(name: &str, uid: &str, id: &str, restarts: i32) -> Pod {
        let mut p = pod(name, uid, json!({"running": {}}), restarts);
        p.status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .container_id = Some(id.into());
        p
    }

    /// The query string a log request carries.
    fn query(params: &LogParams) -> String {
        let uri = kube::core::Request::new("/p")
            .logs("x", params)
            .unwrap()
            .uri()
            .to_string();
        uri.split_once('?').unwrap().1.to_owned()
    }

    /// (replica, query) of the streams opened.
    fn opened(steps: &[Step]) -> Vec<(String, String)> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Open(o) => Some((o.replica.label(), query(&o.params))),
                Step::Notice(_) => None,
            })
            .collect()
    }

    fn notices(steps: &[Step]) -> Vec<&str> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Notice(n) => Some(n.as_str()),
                Step::Open(_) => None,
            })
            .collect()
    }

    fn open(step: &Step) -> &Open {
        match step {
            Step::Open(o) => o,
            Step::Notice(n) => panic!("a notice: {n}"),
        }
    }

    fn pair(label: &str, query: &str) -> (String, String) {
        (label.to_owned(), query.to_owned())
    }

    #[test]
    fn listed_pods_are_followed_with_tail_and_pending_ones_once_they_run() {
        let mut t = Tracker::new(10, Some(5), None);
        t.seen(&running("tf-worker-1", "u1", "c1", 0), true);
        let creating = json!({"waiting": {"reason": "ContainerCreating"}});
        t.seen(&pod("tf-worker-0", "u0", creating, 0), true);
        let steps = t.steps();
        assert_eq!(
            opened(&steps),
            [pair(
                "worker-1",
                "&container=tensorflow&follow=true&tailLines=5"
            )]
        );
        assert_eq!(
            notices(&steps),
            ["worker-0: pod tf-worker-0 is Pending (ContainerCreating); following it once it starts"]
        );
        assert!(t.steps().is_empty());
        // The pending pod starts: followed with the user's --tail too.
        t.seen(&running("tf-worker-0", "u0", "c0", 0), false);
        assert_eq!(
            opened(&t.steps()),
            [pair(
                "worker-0",
                "&container=tensorflow&follow=true&tailLines=5"
            )]
        );
        assert_eq!(t.active(), 2);
    }

    #[test]
    fn a_recreated_pod_and_a_restarted_container_are_followed_from_their_first_line() {
        let mut t = Tracker::new(10, Some(5), None);
        t.seen(&running("tf-worker-1", "u1", "c1", 0), true);
        assert_eq!(opened(&t.steps()).len(), 1);
        // The container exits: its stream ends, nothing to reopen.
        let exited = json!({"terminated": {"exitCode": 137, "containerID": "c1"}});
        t.seen(&pod("tf-worker-1", "u1", exited, 0), false);
        t.ended("u1", 3, Timestamp::UNIX_EPOCH);
        assert!(t.steps().is_empty());
        // The kubelet restarts it: its new run, from the first line.
        t.seen(&running("tf-worker-1", "u1", "c2", 1), false);
        let steps = t.steps();
        assert_eq!(
            opened(&steps),
            [pair("worker-1", "&container=tensorflow&follow=true")]
        );
        assert_eq!(
            notices(&steps),
            ["worker-1: container tensorflow of pod tf-worker-1 restarted; following its new run"]
        );
        // The pod is deleted and recreated under a new uid.
        t.deleted("u1");
        t.seen(&running("tf-worker-1", "u2", "c3", 0), false);
        let steps = t.steps();
        assert_eq!(
            opened(&steps),
            [pair("worker-1", "&container=tensorflow&follow=true")]
        );
        assert_eq!(
            notices(&steps),
            ["worker-1: following the new pod tf-worker-1"]
        );
        // The old pod's stream ends: it no longer counts.
        t.ended("u1", 0, Timestamp::UNIX_EPOCH);
        assert_eq!(t.active(), 1);
    }

    #[test]
    fn a_stream_that_ends_while_the_container_runs_is_reopened_from_then() {
        let mut t = Tracker::new(10, None, Some(Duration::from_secs(60)));
        t.seen(&running("tf-worker-1", "u1", "c1", 0), true);
        assert_eq!(
            opened(&t.steps()),
            [pair(
                "worker-1",
                "&container=tensorflow&follow=true&sinceSeconds=60"
            )]
        );
        let then = Timestamp::from_second(1_800_000_000).unwrap();
        t.ended("u1", 7, then);
        let steps = t.steps();
        assert_eq!(
            opened(&steps),
            [pair(
                "worker-1",
                "&container=tensorflow&follow=true&sinceTime=2027-01-15T08%3A00%3A00Z"
            )]
        );
        assert_eq!(open(&steps[0]).delay, Duration::from_secs(1));
        assert!(notices(&steps).is_empty());
        // Reopened streams that bring nothing back off, up to 30 s.
        t.ended("u1", 0, then);
        assert_eq!(open(&t.steps()[0]).delay, Duration::from_secs(2));
        for _ in 0..10 {
            t.ended("u1", 0, then);
            t.steps();
        }
        t.ended("u1", 0, then);
        assert_eq!(open(&t.steps()[0]).delay, MAX_REOPEN_DELAY);
    }

    #[test]
    fn streams_beyond_the_maximum_wait_for_a_free_one() {
        let mut t = Tracker::new(1, None, None);
        t.seen(&running("tf-worker-0", "u0", "c0", 0), true);
        t.seen(&running("tf-worker-1", "u1", "c1", 0), true);
        let steps = t.steps();
        assert_eq!(opened(&steps)[0].0, "worker-0");
        assert_eq!(
            notices(&steps),
            ["worker-1: waiting for a free log stream (--max-streams 1)"]
        );
        assert!(t.steps().is_empty());
        // worker-0's pod is gone: its stream ends and worker-1 gets it.
        t.deleted("u0");
        t.ended("u0", 2, Timestamp::UNIX_EPOCH);
        assert_eq!(opened(&t.steps())[0].0, "worker-1");
    }

    #[test]
    fn a_relist_forgets_pods_deleted_while_the_watch_was_down() {
        let mut t = Tracker::new(10, None, None);
        let waiting = json!({"waiting": {"reason": "ContainerCreating"}});
        t.seen(&pod("tf-worker-0", "u0", waiting.clone(), 0), true);
        t.seen(&pod("tf-worker-1", "u1", waiting, 0), true);
        assert_eq!(notices(&t.steps()).len(), 2);
        t.watched(watcher::Event::Init);
        let started = running("tf-worker-1", "u1", "c1", 0);
        t.watched(watcher::Event::InitApply(started));
        t.watched(watcher::Event::InitDone);
        assert_eq!(opened(&t.steps())[0].0, "worker-1");
        assert_eq!(t.pods.len(), 1);
    }

    #[test]
    fn a_pod_without_its_framework_container_is_told_once() {
        let mut t = Tracker::new(10, None, None);
        let mut p = running("tf-worker-0", "u0", "c0", 0);
        p.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("dljob.dev/container".into(), "gone".into());
        t.seen(&p, true);
        assert_eq!(
            notices(&t.steps()),
            ["worker-0: pod tf-worker-0 has no framework container to read (does dljob.dev/container name one it has?)"]
        );
        assert!(t.steps().is_empty());
    }
}
