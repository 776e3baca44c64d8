//! `dljob logs`: the framework container's log of every pod of a job, each
//! line prefixed with the replica that wrote it.
//!
//! Pure: [`Format`] (a line as text or JSON). I/O: [`fetch`] (every pod's
//! log once, bounded concurrency, printed in replica order) and the stream
//! helpers [`super::follow`] shares; the command, which picks one or the
//! other, is [`super::logs`].

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures::AsyncBufReadExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use serde::Serialize;
use tokio::sync::{mpsc, Semaphore};

use super::replica::{self, ReplicaOrder, ReplicaPod};
use crate::args::{LogsArgs, LogsOutput};

/// Lines a stream may read ahead of the printer before it waits.
pub(super) const STREAM_BUFFER: usize = 256;

// ---- pure ------------------------------------------------------------------

/// Prefix colours (ANSI SGR foreground codes), one per replica: the
/// replica's rank in the topology picks one, so neighbours differ and a
/// replica keeps its colour across runs. Red comes last: it reads as error.
const COLOURS: [&str; 12] = [
    "36", "33", "32", "35", "34", "96", "93", "92", "95", "94", "91", "31",
];

/// Where a line comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Source {
    pub label: String,
    pub role: String,
    pub index: Option<u32>,
    pub pod: String,
    pub container: String,
    colour: &'static str,
}

/// How lines are printed: `role-index | line`, coloured or not, or one JSON
/// object per line.
#[derive(Clone, Debug)]
pub(crate) struct Format {
    job: String,
    output: LogsOutput,
    colour: bool,
    width: usize,
    order: ReplicaOrder,
}

#[derive(Serialize)]
struct JsonLine<'a> {
    job: &'a str,
    role: &'a str,
    index: Option<u32>,
    pod: &'a str,
    container: &'a str,
    line: &'a str,
}

impl Format {
    /// Prefixes padded to the widest label of `pods` or of their topology.
    pub(crate) fn new(job: &str, output: LogsOutput, colour: bool, pods: &[ReplicaPod]) -> Self {
        let order = ReplicaOrder::of_pods(pods);
        let width = pods
            .iter()
            .map(|p| p.label().chars().count())
            .chain([order.label_width()])
            .max()
            .unwrap_or(0);
        Self {
            job: job.to_owned(),
            output,
            colour: colour && output == LogsOutput::Text,
            width,
            order,
        }
    }

    /// The source of a replica's lines, read from its framework `container`.
    pub(crate) fn source(&self, r: &ReplicaPod, container: &str) -> Source {
        let label = r.label();
        let slot = r
            .index
            .and_then(|i| self.order.rank(&r.role, i))
            .map_or_else(|| fnv1a(label.as_bytes()), u64::from);
        Source {
            colour: COLOURS[(slot % COLOURS.len() as u64) as usize],
            label,
            role: r.role.clone(),
            index: r.index,
            pod: r.name.clone(),
            container: container.to_owned(),
        }
    }

    /// One log line (its bytes as read, with or without the line break) as
    /// printed, ending in a line break. Bytes that are not UTF-8 are shown
    /// as U+FFFD.
    pub(crate) fn line(&self, src: &Source, raw: &[u8]) -> String {
        let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let text = String::from_utf8_lossy(raw);
        match self.output {
            LogsOutput::Json => {
                let mut s = serde_json::to_string(&JsonLine {
                    job: &self.job,
                    role: &src.role,
                    index: src.index,
                    pod: &src.pod,
                    container: &src.container,
                    line: &text,
                })
                .unwrap_or_default();
                s.push('\n');
                s
            }
            LogsOutput::Text if self.colour => format!(
                "\x1b[{}m{:<w$}\x1b[0m | {text}\n",
                src.colour,
                src.label,
                w = self.width
            ),
            LogsOutput::Text => format!("{:<w$} | {text}\n", src.label, w = self.width),
        }
    }
}

/// FNV-1a: a colour for a replica outside the topology, the same every run.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The log request for the first read of a pod: the user's `--tail` and
/// `--since`.
pub(super) fn first_read(
    container: &str,
    tail: Option<u64>,
    since: Option<Duration>,
    follow: bool,
) -> LogParams {
    LogParams {
        container: Some(container.to_owned()),
        follow,
        tail_lines: tail.map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        since_seconds: since.map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
        ..LogParams::default()
    }
}

// ---- I/O -------------------------------------------------------------------

/// A message from a stream to the printer.
pub(super) enum Msg {
    Line(String),
    /// For standard error.
    Notice(String),
    /// For standard error; the command exits 1.
    Failed(String),
}

/// The job's pods, or why there are none: a job that does not exist is an
/// error; a role without pods is an error naming the role; a DLJob without
/// pods (finished and cleaned up, or not started) is told on `err`.
pub(super) async fn job_pods(
    client: &kube::Client,
    ns: &str,
    args: &LogsArgs,
    err: &mut dyn Write,
) -> anyhow::Result<Vec<Pod>> {
    let pods = super::list_pods(client, ns, &args.job, args.role.as_deref()).await?;
    if !pods.is_empty() {
        return Ok(pods);
    }
    if let Some(role) = &args.role {
        if !super::list_pods(client, ns, &args.job, None)
            .await?
            .is_empty()
        {
            anyhow::bail!(
                "job {:?} in namespace {ns:?} has no pods of role {role:?} (label {})",
                args.job,
                super::pod_selector(&args.job, Some(role))
            );
        }
    }
    match super::get_dljob(client, ns, &args.job).await? {
        None => Err(super::no_such_job(&args.job, ns)),
        Some(dljob) => {
            let phase = dljob.status.map(|s| s.phase).unwrap_or_default();
            writeln!(
                err,
                "job {:?} in namespace {ns:?} has no pods; its DLJob is {}{}",
                args.job,
                phase.as_str(),
                if args.follow {
                    ": waiting for them"
                } else if phase.is_finished() {
                    ", and its clean-pod policy may have removed them"
                } else {
                    ""
                }
            )?;
            Ok(pods)
        }
    }
}

/// Reads one stream to its end, sending each line formatted; returns the
/// lines read and the error that ended it, if any.
pub(super) async fn read_stream(
    api: &Api<Pod>,
    pod: &str,
    params: &LogParams,
    format: &Format,
    src: &Source,
    tx: &mpsc::Sender<Msg>,
) -> (u64, Option<String>) {
    let stream = match api.log_stream(pod, params).await {
        Ok(s) => s,
        Err(e) => return (0, Some(super::api_message(&e))),
    };
    let mut reader = std::pin::pin!(stream);
    let mut buf = Vec::new();
    let mut lines = 0;
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) => return (lines, None),
            Ok(_) => {
                lines += 1;
                if tx.send(Msg::Line(format.line(src, &buf))).await.is_err() {
                    return (lines, None);
                }
            }
            Err(e) => return (lines, Some(format!("the log stream broke: {e}"))),
        }
    }
}

/// Every pod's log once: up to `--max-streams` read at a time, each pod's
/// lines printed together, pods in replica order. Pods whose container has
/// not run are told on `err` in their place; pods whose log cannot be read
/// too, and the exit code is then 1.
pub async fn fetch(
    client: &kube::Client,
    ns: &str,
    args: &LogsArgs,
    colour: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let pods = job_pods(client, ns, args, err).await?;
    let mut members: Vec<(ReplicaPod, Pod)> = pods
        .into_iter()
        .map(|p| (ReplicaPod::of(&p).reading(&p, args.container.as_deref()), p))
        .collect();
    let order = ReplicaOrder::of_pods(members.iter().map(|(r, _)| r));
    members.sort_by(|a, b| order.key(&a.0).cmp(&order.key(&b.0)));
    let replicas: Vec<ReplicaPod> = members.iter().map(|(r, _)| r.clone()).collect();
    let format = Arc::new(Format::new(&args.job, args.output, colour, &replicas));
    let api = Api::<Pod>::namespaced(client.clone(), ns);

    let mut senders = Vec::with_capacity(members.len());
    let mut receivers = Vec::with_capacity(members.len());
    for _ in &members {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        senders.push(tx);
        receivers.push(rx);
    }
    // Permits are taken in replica order, so the pod being printed always
    // holds one: the others read ahead into their buffers meanwhile.
    let permits = Arc::new(Semaphore::new(usize::from(args.max_streams)));
    let start = async {
        for ((r, pod), tx) in members.into_iter().zip(senders) {
            if tx.is_closed() {
                return; // the printer stopped
            }
            let label = r.label();
            let Some(container) = r.container.clone() else {
                let _ = tx
                    .send(Msg::Failed(r.no_container(args.container.as_deref())))
                    .await;
                continue;
            };
            if !replica::container_status(&pod, Some(&container)).is_some_and(replica::has_run) {
                let _ = tx
                    .send(Msg::Notice(format!(
                        "{label}: pod {} is {}; no logs yet",
                        r.name,
                        replica::not_started(&pod, Some(&container))
                    )))
                    .await;
                continue;
            }
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let (api, format) = (api.clone(), format.clone());
            let params = first_read(&container, args.tail, args.since, false);
            tokio::spawn(async move {
                let src = format.source(&r, &container);
                let (_, error) = read_stream(&api, &r.name, &params, &format, &src, &tx).await;
                if let Some(e) = error {
                    let _ = tx
                        .send(Msg::Failed(format!(
                            "{label}: cannot read the log of pod {}: {e}",
                            r.name
                        )))
                        .await;
                }
                drop(permit);
            });
        }
    };
    let print = async {
        let mut failed = false;
        for mut rx in receivers {
            while let Some(msg) = rx.recv().await {
                match msg {
                    Msg::Line(line) => out.write_all(line.as_bytes())?,
                    Msg::Notice(n) => {
                        out.flush()?;
                        writeln!(err, "{n}")?;
                    }
                    Msg::Failed(f) => {
                        failed = true;
                        out.flush()?;
                        writeln!(err, "{f}")?;
                    }
                }
            }
        }
        out.flush()?;
        Ok::<bool, std::io::Error>(failed)
    };
    let ((), failed) = tokio::join!(start, print);
    Ok(if failed? {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(role: &str, index: Option<u32>, topology: &str) -> ReplicaPod {
        ReplicaPod {
            name: format!("tf-{role}-{}", index.unwrap_or(9)),
            uid: String::new(),
            role: role.into(),
            index,
            container: Some("tensorflow".into()),
            topology: crate::contract::Topology::parse(topology).ok(),
        }
    }

    #[test]
    fn text_lines_are_prefixed_and_padded_to_the_widest_replica() {
        let pods = [
            replica("chief", Some(0), "chief=1,worker=2"),
            replica("worker", Some(1), "chief=1,worker=2"),
        ];
        let f = Format::new("tf", LogsOutput::Text, false, &pods);
        let chief = f.source(&pods[0], "tensorflow");
        assert_eq!(f.line(&chief, b"step 1\r\n"), "chief-0  | step 1\n");
        assert_eq!(
            f.line(&f.source(&pods[1], "tensorflow"), b"last, no newline"),
            "worker-1 | last, no newline\n"
        );
        assert_eq!(
            f.line(&chief, b"bad \xff byte\n"),
            "chief-0  | bad \u{fffd} byte\n"
        );
    }

    #[test]
    fn colours_follow_the_rank_in_the_topology() {
        let t = "chief=1,worker=2";
        let pods = [
            replica("chief", Some(0), t),
            replica("worker", Some(0), t),
            replica("worker", Some(1), t),
        ];
        let f = Format::new("tf", LogsOutput::Text, true, &pods);
        let lines: Vec<String> = pods
            .iter()
            .map(|p| f.line(&f.source(p, "tensorflow"), b"x\n"))
            .collect();
        assert_eq!(
            lines,
            [
                "\x1b[36mchief-0 \x1b[0m | x\n",
                "\x1b[33mworker-0\x1b[0m | x\n",
                "\x1b[32mworker-1\x1b[0m | x\n"
            ]
        );
        // No colour in JSON, whatever the terminal.
        let f = Format::new("tf", LogsOutput::Json, true, &pods);
        assert!(!f
            .line(&f.source(&pods[0], "tensorflow"), b"x")
            .contains('\x1b'));
        // Outside the topology: a colour from the label, the same each time.
        let f = Format::new("tf", LogsOutput::Text, true, &pods);
        let stray = replica("evaluator", Some(0), t);
        assert_eq!(f.source(&stray, "c"), f.source(&stray, "c"));
    }

    #[test]
    fn json_lines_carry_job_role_index_pod_and_container() {
        let pods = [
            replica("worker", Some(1), "worker=2"),
            replica("worker", None, "worker=2"),
        ];
        let f = Format::new("tf", LogsOutput::Json, false, &pods);
        assert_eq!(
            f.line(&f.source(&pods[0], "tensorflow"), b"loss=\"0.1\"\n"),
            "{\"job\":\"tf\",\"role\":\"worker\",\"index\":1,\"pod\":\"tf-worker-1\",\"container\":\"tensorflow\",\"line\":\"loss=\\\"0.1\\\"\"}\n"
        );
        assert_eq!(
            f.line(&f.source(&pods[1], "tensorflow"), b"x"),
            "{\"job\":\"tf\",\"role\":\"worker\",\"index\":null,\"pod\":\"tf-worker-9\",\"container\":\"tensorflow\",\"line\":\"x\"}\n"
        );
    }
}
