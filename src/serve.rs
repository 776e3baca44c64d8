//! The `dljob serve` process: the tokio runtime, the cluster connection,
//! the config reload feeding both halves, the reconciler, the webhook
//! server, signals and the drain. The webhook ([`crate::webhook`]) and the
//! reconciler ([`crate::reconciler`]) know nothing of each other or of the
//! process; CLI commands that need the cluster connect through [`connect`].

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use prometheus_client::registry::Registry;

use crate::args::ServeArgs;
use crate::telemetry::Chain;
use crate::validate::{NoPeers, PeerSource};
use crate::webhook::{reload, run, tls, Inputs, Settings, TlsSource};

/// How often the config and certificate files are checked for changes.
const RELOAD_INTERVAL: Duration = Duration::from_secs(2);
/// How long in-flight reviews get to finish after the drain.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(25);
/// How long a stopping replica waits for the API server to take its
/// leader Lease back (a successor then leads at once, not when it expires).
const LEASE_RELEASE_WAIT: Duration = Duration::from_secs(5);
/// How long startup waits for a cluster before serving the webhook alone.
pub(crate) const CLUSTER_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `dljob serve` until SIGTERM or SIGINT.
pub fn serve(args: &ServeArgs) -> anyhow::Result<ExitCode> {
    crate::telemetry::init(args.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(serve_async(args))
}

async fn serve_async(args: &ServeArgs) -> anyhow::Result<ExitCode> {
    // One set of signal listeners for the whole run, from its start: a
    // signal that comes while the webhook starts (after it logged that it
    // listens, before anything else) is not the default action's, and a
    // second one that comes while the drain starts is not lost between two
    // listeners.
    let mut signals = Signals::new();
    let mut registry = Registry::default();
    let on_reconciler = reconciler_runtime(args)?;

    let client = if args.no_reconciler {
        tracing::info!("--no-reconciler: serving the webhook alone");
        None
    } else {
        // The client is made on the runtime that uses it: its connections'
        // tasks run there.
        let probe = on_reconciler
            .spawn(async {
                connect(CLUSTER_PROBE_TIMEOUT, &crate::args::ClusterArgs::default()).await
            })
            .await
            .context("probing the cluster")?;
        match probe {
            Ok(client) => Some(client),
            Err(why) if !args.no_webhook => {
                tracing::warn!(reason = %why, "no cluster reachable: serving the webhook alone, without the reconciler");
                None
            }
            Err(why) => {
                anyhow::bail!("--no-webhook runs only the reconciler, which needs a cluster: {why}")
            }
        }
    };
    let serving_image = match (&args.wait_for_names_image, &client) {
        (Some(image), _) => Some(image.clone()),
        (None, Some(client)) => match (std::env::var("POD_NAME"), std::env::var("POD_NAMESPACE")) {
            (Ok(name), Ok(namespace)) => {
                let client = client.clone();
                on_reconciler
                    .spawn(async move { own_image(&client, &name, &namespace).await })
                    .await
                    .context("reading the serving pod's image")?
            }
            _ => None,
        },
        (None, None) => None,
    };
    let (config, config_task) =
        reload::watch_config(args.config.clone(), RELOAD_INTERVAL, serving_image)?;
    if let Some(path) = &args.config {
        tracing::info!(path = %path.display(), "config loaded; re-read when it changes");
    }
    tracing::info!(
        image = config.borrow().wait_for_names_image(),
        "member pods wait for their names in this image (init container {})",
        crate::contract::WAIT_FOR_NAMES_CONTAINER
    );
    let (peers, reconciler): (Arc<dyn PeerSource>, _) = match client {
        Some(client) => {
            let config = config.clone();
            let (started, back) = on_reconciler
                .spawn(async move {
                    let started = crate::reconciler::start(client, &mut registry, config).await;
                    (started, registry)
                })
                .await
                .context("starting the reconciler")?;
            registry = back;
            let (peers, running) = started.context("starting the reconciler")?;
            tracing::info!("reconciler started");
            (peers, Some(running))
        }
        None => {
            if config.borrow().launcher_gate() {
                tracing::warn!("no reconciler in this process: mpi launchers and chainer masters get the scheduling gate dljob.dev/workers-ready, which only a reconciler removes; run one (another replica or deployment), or set launcherGate: false in the config");
            }
            (Arc::new(NoPeers), None)
        }
    };

    let webhook = if args.no_webhook {
        tracing::info!("--no-webhook: running only the reconciler");
        None
    } else {
        let tls = match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => TlsSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
            _ => TlsSource::SelfSigned {
                ca_out: std::path::absolute(&args.self_signed_ca_out)
                    .unwrap_or_else(|_| args.self_signed_ca_out.clone()),
                extra_sans: args.self_signed_sans.clone(),
            },
        };
        match &args.client_ca {
            Some(path) => tracing::info!(
                ca = %path.display(),
                "clients of the webhook port must present a certificate this CA signed (re-read when it changes); denials name the job's other members"
            ),
            None => tracing::info!("no --client-ca: whoever reaches the webhook port gets answers, so denials do not name the job's other members (docs/client-certificate.md)"),
        }
        let settings = Settings {
            max_body_bytes: args.max_body_bytes,
            max_body_bytes_in_flight: args.max_body_bytes_in_flight,
            read_timeout: Duration::from_secs(args.read_timeout_secs.max(1)),
            connections: crate::webhook::Limits {
                max_connections: args.max_connections as usize,
                first_request: Duration::from_secs(args.first_request_timeout_secs),
                idle: Duration::from_secs(args.idle_timeout_secs),
            },
            metrics_listen: args.metrics_listen,
            reload_interval: RELOAD_INTERVAL,
            log_reviews: args.log_reviews,
            client_ca: args.client_ca.clone(),
            ..Settings::new(args.listen, tls.clone())
        };
        let running = run(settings, Inputs { config, peers }, registry).await?;
        match &tls {
            TlsSource::Files { cert, key } => tracing::info!(
                address = %running.local_addr(),
                cert = %cert.display(),
                key = %key.display(),
                "webhook listening (HTTPS, HTTP/2 and HTTP/1.1); certificate re-read when it changes"
            ),
            TlsSource::SelfSigned { ca_out, extra_sans } => {
                let key = tls::ca_key_path(ca_out);
                match running.ca_origin() {
                    Some(crate::certs::CaOrigin::Created(why)) => tracing::info!(
                        ca = %ca_out.display(),
                        key = %key.display(),
                        reason = %why,
                        "made a new self-signed CA; clients must trust it anew"
                    ),
                    _ => tracing::info!(
                        ca = %ca_out.display(),
                        key = %key.display(),
                        "reusing the self-signed CA from the last run"
                    ),
                }
                tracing::info!(
                    address = %running.local_addr(),
                    ca = %ca_out.display(),
                    "webhook listening with a self-signed certificate for localhost, 127.0.0.1{}; \
                     trust it with: curl --cacert {}",
                    extra_sans.iter().map(|s| format!(", {s}")).collect::<String>(),
                    ca_out.display()
                )
            }
        }
        if let Some(addr) = running.metrics_addr() {
            tracing::info!(address = %addr, "metrics on plain HTTP at /metrics (not on the webhook port)");
        }
        Some(running)
    };

    let mut reconciler = reconciler;
    let outcome = wait(
        webhook.as_ref().is_some(),
        reconciler.as_mut().map(|r| &mut r.task),
        &mut signals,
    )
    .await;
    // The leader Lease is given up while the webhook drains.
    let give_up = async move {
        if let Some(r) = reconciler {
            r.stop(LEASE_RELEASE_WAIT).await;
        }
    };
    match webhook {
        Some(running) => {
            let drain = Duration::from_secs(args.drain_seconds);
            tracing::info!(
                drain_seconds = args.drain_seconds,
                "draining: /readyz answers 503 while reviews are still served, then no new connections and in-flight reviews finish (--drain-seconds; a second Ctrl-C or SIGTERM stops at once)"
            );
            // A second signal (Ctrl-C again at a terminal) does not wait for
            // the drain: the listener closes as the process exits.
            tokio::select! {
                (drained, ()) = futures::future::join(running.drain(drain, SHUTDOWN_GRACE), give_up) => {
                    drained.context("webhook server")?;
                }
                signal = signals.next() => {
                    tracing::info!(signal, "stopping without the rest of the drain");
                }
            }
        }
        None => tokio::select! {
            () = give_up => {}
            signal = signals.next() => {
                tracing::info!(signal, "stopping without giving the leader Lease up");
            }
        },
    }
    config_task.abort();
    outcome?;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// The container dljob runs as in deploy/'s Deployment.
const SERVING_CONTAINER: &str = "dljob";
/// How many times a passing failure to read the serving pod is tried.
const OWN_IMAGE_TRIES: u32 = 3;

/// The image this process runs from, as its pod's spec names it: the
/// default image of the init container `dljob-wait-for-names`, so that
/// member pods pull what the install already pulls (a mirror, a pinned
/// digest, an overlay's `images:`). `name` and `namespace` are the pod's
/// (POD_NAME and POD_NAMESPACE, from the downward API). None when the pod
/// cannot be read or has no such container, said in the log.
async fn own_image(client: &kube::Client, name: &str, namespace: &str) -> Option<String> {
    let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), namespace);
    let fallback = crate::contract::DEFAULT_IMAGE;
    // A passing failure (the API server restarting, a dropped connection)
    // is tried again, OWN_IMAGE_TRIES times in all: a replica that fell
    // back would hand out an image an air-gapped cluster cannot pull for as
    // long as it runs. A refusal (RBAC, a pod that is not there) is not.
    let mut tries = 0;
    let pod = loop {
        tries += 1;
        let why = match tokio::time::timeout(CLUSTER_PROBE_TIMEOUT, pods.get(name)).await {
            Ok(Ok(pod)) => break pod,
            Ok(Err(kube::Error::Api(s))) if s.code < 500 && s.code != 429 => {
                tracing::warn!(pod = %name, namespace = %namespace, error = %s.message, "cannot read this pod for its image; member pods' dljob-wait-for-names runs {fallback} (set waitForNamesImage in the config, or --wait-for-names-image)");
                return None;
            }
            Ok(Err(e)) => Chain(&e).to_string(),
            Err(_) => format!("no answer within {CLUSTER_PROBE_TIMEOUT:?}"),
        };
        if tries == OWN_IMAGE_TRIES {
            tracing::warn!(pod = %name, namespace = %namespace, error = %why, tries, "cannot read this pod for its image; member pods' dljob-wait-for-names runs {fallback} (set waitForNamesImage in the config, or --wait-for-names-image)");
            return None;
        }
        tracing::info!(pod = %name, error = %why, "reading this pod for its image again in 1 s");
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let containers = pod.spec.map(|s| s.containers).unwrap_or_default();
    let chosen = match containers.iter().find(|c| c.name == SERVING_CONTAINER) {
        Some(c) => Some(c),
        None if containers.len() == 1 => containers.first(),
        None => None,
    };
    let image = chosen.and_then(|c| c.image.clone());
    if image.is_none() {
        tracing::warn!(pod = %name, "this pod has no container named {SERVING_CONTAINER} with an image; member pods' dljob-wait-for-names runs {fallback} (set waitForNamesImage in the config, or --wait-for-names-image)");
    }
    image
}

/// Where the reconciler runs. Beside the webhook it gets a runtime of its
/// own, on one thread: a resync of thousands of jobs then queues behind
/// itself, not in front of admission reviews, which keep the main
/// runtime's workers (a review waiting behind reconciles made its p99 3-8x
/// the idle one: BENCHMARKS.md). Alone (`--no-webhook`) it uses the main
/// runtime.
fn reconciler_runtime(args: &ServeArgs) -> anyhow::Result<tokio::runtime::Handle> {
    if args.no_webhook || args.no_reconciler {
        return Ok(tokio::runtime::Handle::current());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the reconciler's tokio runtime")?;
    let handle = runtime.handle().clone();
    // The thread drives the runtime's tasks for as long as the process
    // lives; the runtime is never dropped (dropping it from async code
    // would panic).
    std::thread::Builder::new()
        .name("dljob-reconciler".into())
        .spawn(move || runtime.block_on(std::future::pending::<()>()))
        .context("starting the reconciler's thread")?;
    Ok(handle)
}

/// Waits for SIGTERM/SIGINT (or for the reconciler to end, which is an
/// error when the webhook is not running).
async fn wait(
    webhook: bool,
    reconciler: Option<&mut tokio::task::JoinHandle<()>>,
    signals: &mut Signals,
) -> anyhow::Result<()> {
    let reconciler_ended = async {
        match reconciler {
            Some(task) => {
                let r = task.await;
                Some(r)
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        signal = signals.next() => {
            tracing::info!(signal, "shutdown requested");
            Ok(())
        }
        ended = reconciler_ended => match ended {
            Some(Err(e)) => anyhow::bail!("the reconciler stopped: {e}"),
            _ if webhook => {
                tracing::warn!("the reconciler stopped; the webhook keeps serving");
                let signal = signals.next().await;
                tracing::info!(signal, "shutdown requested");
                Ok(())
            }
            _ => anyhow::bail!("the reconciler stopped"),
        },
    }
}

/// SIGTERM and SIGINT, listened for from creation on: each comes out of
/// [`Signals::next`] however long after it was delivered.
struct Signals {
    #[cfg(unix)]
    streams: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let streams = match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(term), Ok(int)) => Some((term, int)),
                _ => None,
            };
            Self { streams }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// The next signal's name.
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        if let Some((term, int)) = &mut self.streams {
            return tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
        }
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}

/// A client for the cluster from the kubeconfig or the in-cluster service
/// account (`cluster`: kubectl's `--kubeconfig` and `--context`, for the
/// commands that take them), checked by asking the API server its version
/// — bounded, so a dead kubeconfig does not hold up startup.
pub(crate) async fn connect(
    timeout: Duration,
    cluster: &crate::args::ClusterArgs,
) -> Result<kube::Client, String> {
    let probe = async {
        let config = cluster_config(cluster).await?;
        let client = kube::Client::try_from(config)
            .map_err(|e| format!("cannot make a client from the kubeconfig: {e}"))?;
        let version = client
            .apiserver_version()
            .await
            .map_err(|e| format!("the API server does not answer: {}", Chain(&e)))?;
        tracing::info!(version = %version.git_version, "connected to the cluster");
        Ok(client)
    };
    tokio::time::timeout(timeout, probe)
        .await
        .unwrap_or_else(|_| Err(format!("the API server did not answer within {timeout:?}")))
}

/// The client config `cluster` names: the kubeconfig file and context
/// given, else what kubectl would use.
async fn cluster_config(cluster: &crate::args::ClusterArgs) -> Result<kube::Config, String> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions {
        context: cluster.context.clone(),
        ..KubeConfigOptions::default()
    };
    let (file, source) = match &cluster.kubeconfig {
        None if cluster.context.is_none() => {
            return kube::Config::infer()
                .await
                .map_err(|e| format!("no usable kubeconfig or in-cluster config: {e}"));
        }
        None => (
            Kubeconfig::read().map_err(|e| format!("--context: {e}"))?,
            "the kubeconfig".to_owned(),
        ),
        Some(path) => (
            Kubeconfig::read_from(path).map_err(|e| format!("--kubeconfig: {e}"))?,
            path.display().to_string(),
        ),
    };
    if let Some(context) = &cluster.context {
        if !file.contexts.iter().any(|c| &c.name == context) {
            let names: Vec<&str> = file.contexts.iter().map(|c| c.name.as_str()).collect();
            return Err(format!(
                "context \"{context}\" is not in {source}; its contexts are: {}",
                names.join(", ")
            ));
        }
    }
    kube::Config::from_custom_kubeconfig(file, &options)
        .await
        .map_err(|e| format!("{source}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;
    use serde_json::{json, Value};
    use tower_test::mock;

    /// Answers the GETs of the pod `dljob-7d9f-x2k` in turn with `answers`
    /// (a pod, or a Status of that code) and returns what `own_image`
    /// found; every answer must be asked for.
    async fn image_of_after(answers: Vec<Result<Value, u16>>) -> Option<String> {
        let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let asked = answers.len();
        let server = tokio::spawn(async move {
            for answer in answers {
                let (request, send) = handle.next_request().await.expect("one request");
                assert_eq!(request.method(), "GET");
                assert_eq!(
                    request.uri().path(),
                    "/api/v1/namespaces/dljob-system/pods/dljob-7d9f-x2k"
                );
                let (status, body) = match answer {
                    Ok(pod) => (200, pod),
                    Err(code) => (
                        code,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                            "reason": if code == 404 { "NotFound" } else { "InternalError" },
                            "message": format!("answered {code}")}),
                    ),
                };
                send.send_response(
                    Response::builder()
                        .status(status)
                        .body(Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap(),
                );
            }
            asked
        });
        let image = own_image(&client, "dljob-7d9f-x2k", "dljob-system").await;
        assert_eq!(server.await.unwrap(), asked);
        image
    }

    async fn image_of(pod: Option<Value>) -> Option<String> {
        image_of_after(vec![pod.ok_or(404)]).await
    }

    fn pod(containers: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dljob-7d9f-x2k", "namespace": "dljob-system"}, "spec": {"containers": containers}})
    }

    #[tokio::test]
    async fn the_serving_image_is_the_dljob_containers_as_its_pod_names_it() {
        // A mesh's sidecar first; the digest an overlay pinned, kept.
        let digest = "registry.example/mirror/dljob@sha256:4f1c0e6d9a7b";
        let both = pod(json!([
            {"name": "istio-proxy", "image": "istio/proxyv2:1.24"},
            {"name": "dljob", "image": digest}
        ]));
        assert_eq!(image_of(Some(both)).await.as_deref(), Some(digest));
        // A renamed container, alone in its pod: still the one.
        let alone = pod(json!([{"name": "webhook", "image": "ghcr.io/dljob/dljob:0.1.0"}]));
        assert_eq!(
            image_of(Some(alone)).await.as_deref(),
            Some("ghcr.io/dljob/dljob:0.1.0")
        );
        // Several, none named dljob: not a guess.
        let neither = pod(json!([
            {"name": "a", "image": "a:1"},
            {"name": "b", "image": "b:1"}
        ]));
        assert_eq!(image_of(Some(neither)).await, None);
        // The pod cannot be read (RBAC, gone): the default, said in the log.
        assert_eq!(image_of(None).await, None);
    }

    /// A passing failure is tried again, three times in all; then the
    /// default, said in the log.
    #[tokio::test(start_paused = true)]
    async fn a_passing_failure_to_read_the_pod_is_tried_again() {
        let pod = pod(json!([{"name": "dljob", "image": "registry.example/dljob:0.1.0"}]));
        assert_eq!(
            image_of_after(vec![Err(503), Err(500), Ok(pod)])
                .await
                .as_deref(),
            Some("registry.example/dljob:0.1.0")
        );
        assert_eq!(
            image_of_after(vec![Err(503), Err(503), Err(503)]).await,
            None
        );
    }
}
