//! `dljob logs` and `dljob describe`: reading a running job back from the
//! cluster for a user.
//!
//! - [`replica`]: which replica a pod is and which container is its
//!   framework container (pure; the rules are [`crate::member`]'s).
//! - [`table`]: aligned columns and ages (pure).
//! - [`logs`]: log lines prefixed by replica, as text or JSON (pure), and
//!   every pod's log fetched once (I/O).
//! - [`follow`]: `logs -f` — which streams to open as pods come, restart
//!   and go (pure), and the watch and streams (I/O).
//! - [`describe`]: one screen from a DLJob, its pods and their Events
//!   (pure), and the three reads that gather them (I/O).
//!
//! The I/O takes a [`kube::Client`] (from [`crate::serve::connect`] on the
//! command line, kube's mocked client in tests) and the writers to print to.

pub mod describe;
pub mod follow;
pub mod logs;
pub(crate) mod replica;
pub(crate) mod table;

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::contract as c;
use crate::crd::DLJob;

/// How long a command waits for the API server to answer its first call.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The label selector of a job's pods, of one role when `role` is given.
pub(crate) fn pod_selector(job: &str, role: Option<&str>) -> String {
    match role {
        Some(r) => format!("{}={job},{}={r}", c::JOB, c::ROLE),
        None => format!("{}={job}", c::JOB),
    }
}

/// A client for the cluster `cluster` names and the namespace to read:
/// `-n`, else the kubeconfig context's namespace (as kubectl chooses).
pub(crate) async fn connect(
    namespace: Option<&str>,
    cluster: &crate::args::ClusterArgs,
) -> anyhow::Result<(kube::Client, String)> {
    let client = crate::serve::connect(CONNECT_TIMEOUT, cluster)
        .await
        .map_err(|why| anyhow::anyhow!("cannot reach the cluster: {why}"))?;
    let ns = namespace.map_or_else(|| client.default_namespace().to_owned(), str::to_owned);
    Ok((client, ns))
}

/// What the API server said, without kube's debug dump of the Status.
pub(crate) fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}

/// The DLJob `job` in `ns`, None when there is none (or when the CRD is not
/// installed: the API server answers 404 for both).
pub(crate) async fn get_dljob(
    client: &kube::Client,
    ns: &str,
    job: &str,
) -> anyhow::Result<Option<DLJob>> {
    Api::<DLJob>::namespaced(client.clone(), ns)
        .get_opt(job)
        .await
        .map_err(|e| anyhow::anyhow!("reading DLJob {job} in namespace {ns}: {}", api_message(&e)))
}

/// The pods labelled `dljob.dev/job=job` (and `dljob.dev/role=role`).
pub(crate) async fn list_pods(
    client: &kube::Client,
    ns: &str,
    job: &str,
    role: Option<&str>,
) -> anyhow::Result<Vec<Pod>> {
    let selector = pod_selector(job, role);
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&selector))
        .await
        .map(|list| list.items)
        .map_err(|e| {
            anyhow::anyhow!(
                "listing the pods of job {job} in namespace {ns}: {}",
                api_message(&e)
            )
        })
}

/// The error for a job with neither a DLJob nor pods.
pub(crate) fn no_such_job(job: &str, ns: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "no job {job:?} in namespace {ns:?}: no DLJob and no pods labelled {}={job} \
         (`kubectl get dlj -A` lists the jobs of every namespace; -n chooses one)",
        c::JOB
    )
}

/// A runtime for one command: the CLI is single-threaded at heart (one
/// printer), so a current-thread runtime serves every stream.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")
}

/// `dljob logs`.
pub fn logs(args: &crate::args::LogsArgs) -> anyhow::Result<std::process::ExitCode> {
    use std::io::IsTerminal as _;
    let colour = args.output == crate::args::LogsOutput::Text
        && std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let result = runtime()?.block_on(async {
        let (client, ns) = connect(args.namespace.as_deref(), &args.cluster).await?;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let mut err = std::io::stderr();
        if args.follow {
            let interrupted = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            follow::follow(&client, &ns, args, colour, &mut out, &mut err, interrupted).await
        } else {
            logs::fetch(&client, &ns, args, colour, &mut out, &mut err).await
        }
    });
    match result {
        // The reader went away (`dljob logs job | head`): done.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            Ok(std::process::ExitCode::SUCCESS)
        }
        other => other,
    }
}
