//! The `dljob` command line's arguments: every subcommand's clap types and
//! the value parsers they use. Imports nothing from the crate (as ripgrep's
//! flags do): the commands read these; these know no command.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// dljob wires up distributed deep-learning training on the Pods,
/// StatefulSets and Indexed Jobs you already have. Label them with
/// dljob.dev/job and dljob.dev/role, annotate dljob.dev/framework and
/// dljob.dev/replicas, and the admission webhook injects TF_CONFIG,
/// MASTER_ADDR/RANK/WORLD_SIZE, DMLC_*, MPI hostfiles, ports and stable
/// hostnames; the reconciler keeps a DLJob status per job.
#[derive(Debug, Parser)]
#[command(name = "dljob", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the admission webhook over HTTPS (and the reconciler when a
    /// cluster is reachable).
    Serve(ServeArgs),
    /// Rewrite manifests offline exactly as the webhook would: prints the
    /// mutated multi-document YAML on stdout, warnings on stderr. With
    /// --pods, prints instead every pod the members will create, each with
    /// the env, hostname and hostfile admission gives it.
    Mutate(MutateArgs),
    /// Check manifests offline against the contract; prints every problem
    /// and exits 1 if there is any. Members in one file are checked against
    /// each other.
    Validate(ManifestArgs),
    /// Add the dljob labels and annotations that make the manifests' Pods,
    /// StatefulSets and Indexed Jobs one job; prints the manifests (or
    /// rewrites the files with --in-place).
    ///
    /// Adds `dljob.dev/job` and `dljob.dev/role` (also on a StatefulSet's pod
    /// template), `dljob.dev/framework`, `dljob.dev/replicas` (the topology the
    /// members' `replicas`, `completions` and plain Pods add up to, in the
    /// framework's role order; left out for a job that is one StatefulSet or
    /// Job, whose size the webhook reads), `dljob.dev/index` on plain Pods of a
    /// role with more than one replica (document order), and the --set
    /// policies to every Pod, apps/v1 StatefulSet and batch/v1 Job of the
    /// input. Other documents pass through byte for byte.
    ///
    /// Roles: --role wins; else the member's own dljob.dev/role label; else the
    /// framework's only role (jax); else the last word of the name that is a
    /// role of the framework, past a numeric suffix and the job name
    /// (`train-worker`, `train-workers`, `train-ps-0`; for generic any DNS
    /// label); else, for a
    /// job of one member, the first role (coordinator first) that can make
    /// the whole job alone. Anything else is an error naming the workload and
    /// the framework's roles.
    ///
    /// dljob keys already present are kept when they agree and never
    /// overwritten: one that disagrees (another job, role, framework, topology
    /// or policy) is an error naming it. A policy already on one member is
    /// copied to the others. Running it again on its output changes nothing,
    /// and its output passes `dljob validate` (checked before anything is
    /// printed or written; exit 1 with every problem otherwise).
    ///
    /// Changed documents are edited in place with the yaml-edit crate:
    /// comments, key order and formatting are kept; new keys go into the
    /// existing labels/annotations mappings (created where absent). Should an
    /// edit not read back as intended, that document is re-serialised with
    /// serde-saphyr instead, losing its comments and formatting, and a warning
    /// says so.
    Label(LabelArgs),
    /// Convert other operators' jobs into dljob jobs: each PyTorchJob,
    /// TFJob, XGBoostJob, PaddleJob, JAXJob, MXJob, MPIJob, ChainerJob,
    /// Volcano Job or TrainJob becomes one labelled Indexed Job (or
    /// StatefulSet) per replica type, task or replicated Job; prints the
    /// manifests (or rewrites the files with --in-place).
    ///
    /// Reads kubeflow.org/v1 PyTorchJob, TFJob, XGBoostJob, PaddleJob,
    /// JAXJob, MXJob (the training-operator's, and the mxnet-operator's with
    /// its run policy inline) and MPIJob, MXJob v1beta1, the MPI operator's
    /// v2beta1 MPIJob, the first forms (TfJob mlkube.io/v1beta1, TFJob and
    /// MXJob kubeflow.org/v1alpha1, MXJob fioravanzo.org/v1alpha1), the
    /// chainer-operator's ChainerJob and Volcano's batch.volcano.sh/v1alpha1
    /// Job; and Kubeflow Trainer v2's TrainJob on its runtime (a
    /// ClusterTrainingRuntime or TrainingRuntime, in the input or given with
    /// --runtime): one Indexed Job per replicated Job of the runtime, with
    /// the TrainJob laid over it as Trainer does. Another kubeflow.org job
    /// kind is refused by name (exit 1). A container's
    /// alpha.kubernetes.io/nvidia-gpu becomes nvidia.com/gpu, with a
    /// warning. Per job it prints one
    /// workload per replica type, named <job>-<role>: an Indexed Job
    /// (completions = parallelism = replicas) for a replica type whose
    /// restartPolicy is OnFailure, Never or ExitCode, since it runs to
    /// completion; a StatefulSet for one whose restartPolicy is Always, the
    /// only policy a StatefulSet allows and one a Job refuses. Each keeps
    /// its replica's pod template whole (its comments too), with the job's
    /// labels and annotations, and gets dljob's keys: the job and role, the
    /// framework and topology, dljob.dev/compat (so that the operator's
    /// images get what they read), and the job's policies (runPolicy's
    /// backoffLimit, activeDeadlineSeconds, ttlSecondsAfterFinished,
    /// cleanPodPolicy and schedulingPolicy; PyTorch's elasticPolicy and
    /// nprocPerNode; MPI's slotsPerWorker, sshAuthMountPath and
    /// mainContainer; Volcano's plugins and policies; the operator's named
    /// port as dljob.dev/port).
    ///
    /// A field dljob cannot honour stops the conversion with a message
    /// naming the field and what to do instead, and nothing is printed or
    /// written; every problem of every job is listed. The result is checked
    /// as `dljob validate` checks it. Other documents pass through byte for
    /// byte, and converting the output again changes nothing.
    #[command(after_help = CONVERT_EXAMPLES)]
    Convert(ConvertArgs),
    /// Print the DLJob CustomResourceDefinition generated from the Rust types.
    Crd,
    /// Generate a CA and a serving certificate for the webhook Service.
    Certs(CertsArgs),
    /// Print Mutating/ValidatingWebhookConfigurations that point at a URL,
    /// for running `dljob serve` outside the cluster during development.
    WebhookConfig(WebhookConfigArgs),
    /// Print the Roles and RoleBindings of an install without a ClusterRole:
    /// in each namespace named, exactly the ClusterRole's rules
    /// (deploy/base/rbac.yaml), bound to dljob's service account. For
    /// deploy/namespaced/, with the same namespaces in its config.yaml
    /// (`namespaces:`) and webhook selector.
    #[command(after_help = RBAC_EXAMPLES)]
    Rbac(RbacArgs),
    /// Print the logs of every replica of a job, each line prefixed with
    /// the replica that wrote it (`worker-1 | …`).
    ///
    /// Reads the framework container of every pod labelled
    /// dljob.dev/job=JOB (the container admission wired:
    /// dljob.dev/container, else kubectl.kubernetes.io/default-container,
    /// else the one named after the framework, else the only one requesting
    /// an accelerator, else the first), or with -c the container or init
    /// container named (dljob-wait-for-names). Without -f, each pod's log is printed
    /// whole, pods in role order (the topology's) then index, up to
    /// --max-streams read at a time. With -f, lines are printed as they
    /// arrive, and pods that start later, are recreated (same role-index,
    /// new pod) or whose container restarts are followed too, until Ctrl-C.
    /// A pod whose container has not started yet is reported on standard
    /// error (e.g. `worker-1: pod train-worker-1 is Pending
    /// (ContainerCreating); no logs yet`) and does not fail the command.
    ///
    /// Prefixes are coloured on a terminal (one colour per replica) and
    /// plain when piped or when NO_COLOR is set. Exit status: 0, 1 when a
    /// pod's log could not be read (the others are printed), 2 when the
    /// cluster or the job is not there.
    #[command(after_help = LOGS_EXAMPLES)]
    Logs(LogsArgs),
    /// Show a job on one screen: its DLJob's phase, conditions, per-role
    /// counts and coordinator, every member pod and the recent Events.
    ///
    /// Reads the DLJob JOB, the pods labelled dljob.dev/job=JOB, the member
    /// StatefulSets and Jobs, and the namespace's Events: the framework,
    /// topology and policies; the phase, restarts against the backoff limit,
    /// start and completion; each condition with its reason, message and
    /// age; the pending/active/succeeded/failed/restarts counts of each role;
    /// the coordinator and its exit; every member pod with its role, index,
    /// node, phase, restarts and last exit of its framework container, by
    /// role then index; and the last 15 Events about the DLJob, its pods and
    /// its workloads. When the pods exist but the DLJob does not, says so
    /// (the reconciler creates it) and still lists the pods. Exit status 2
    /// when the cluster or the job is not there.
    #[command(after_help = DESCRIBE_EXAMPLES)]
    Describe(DescribeArgs),
    /// Wait until each NAME resolves, then exit 0: what the init container
    /// dljob-wait-for-names of a member pod runs, from dljob's own image,
    /// before the framework starts (docs/lifecycle.md).
    ///
    /// Looks each name up as the framework will (getaddrinfo: /etc/hosts,
    /// then DNS with the pod's search path), again after 1 s, 2 s, ... up
    /// to every 5 s, and says in its log when each resolves and every 30 s
    /// while one does not. After --timeout seconds in all (a lookup under
    /// way ends first, within the resolver's own timeout) it gives up: it
    /// says why on standard error and in the termination message (where the
    /// reconciler reads it for the DLJob's NameWaitFailed condition) and
    /// exits 0 all the same, so that the framework starts as it would
    /// without the step.
    #[command(after_help = WAIT_FOR_NAMES_EXAMPLES)]
    WaitForNames(WaitForNamesArgs),
}

const WAIT_FOR_NAMES_EXAMPLES: &str = "Example (as admission writes it):
  dljob wait-for-names --timeout 600 --namespace ml --service xg -- \\
    xg-worker-0.xg.ml.svc xg-master-0.xg.ml.svc";

const LOGS_EXAMPLES: &str = "Examples:
  dljob logs mnist                      every replica's log, replica by replica
  dljob logs mnist -f --tail 20         the last 20 lines of each, then follow
  dljob logs mnist --role worker --since 10m
  dljob logs mnist -c dljob-wait-for-names   each pod's wait for its names
  dljob logs mnist -o json | jq 'select(.index == 0)'";

const CONVERT_EXAMPLES: &str = "Examples:
  dljob convert -f pytorchjob.yaml > mnist.yaml
  dljob convert -f jobs/ --in-place
  kubectl get pytorchjob mnist -o yaml | dljob convert -f -
  kubectl get clustertrainingruntime torch-distributed -o yaml > runtime.yaml
  dljob convert -f trainjob.yaml --runtime runtime.yaml

docs/migration.md maps every field of every operator.";

const RBAC_EXAMPLES: &str = "Examples:
  dljob rbac -n team-a -n team-b > deploy/namespaced/roles.yaml
  dljob rbac -n research | kubectl apply -f -";

const DESCRIBE_EXAMPLES: &str = "Examples:
  dljob describe mnist
  dljob describe tf-ps -n research";

/// What `dljob logs` prints for each line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogsOutput {
    /// `role-index | line`.
    Text,
    /// One JSON object per line: job, role, index, pod, container, line.
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct LogsArgs {
    /// The job: its DLJob's name, the value of its pods' dljob.dev/job label.
    pub job: String,
    /// Namespace of the job (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Keep following the logs, of new and restarted pods too, until Ctrl-C.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Only the pods of this role (dljob.dev/role), e.g. worker.
    #[arg(long)]
    pub role: Option<String>,
    /// Read this container of every pod instead of its framework
    /// container: another container, or an init container, e.g.
    /// dljob-wait-for-names (how long each pod waited for its names, or
    /// why it gave up).
    #[arg(short = 'c', long, value_name = "NAME")]
    pub container: Option<String>,
    /// Only lines written in this last while, e.g. 10s, 5m, 2h, 1h30m.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub since: Option<std::time::Duration>,
    /// Only the last N lines of each pod's log (with -f: before following).
    #[arg(long, value_name = "N")]
    pub tail: Option<u64>,
    /// Line format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: LogsOutput,
    /// Log streams open at once. Without -f, the pods beyond it wait for a
    /// free one; with -f, a job with more pods than this is refused (follow
    /// one role with --role, or raise it).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_streams: u16,
}

#[derive(Debug, Clone, Args)]
pub struct DescribeArgs {
    /// The job: its DLJob's name, the value of its pods' dljob.dev/job label.
    pub job: String,
    /// Namespace of the job (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `dljob wait-for-names`'s arguments (its help is on
/// [`Command::WaitForNames`]).
#[derive(Debug, Clone, Args)]
pub struct WaitForNamesArgs {
    /// The names, in the order they are waited for.
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<String>,
    /// Seconds to wait in all before giving up (the config's
    /// waitForNamesSeconds).
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub timeout: u32,
    /// The job's namespace, for the message of a wait that gave up.
    #[arg(long)]
    pub namespace: Option<String>,
    /// The job's headless Service, for the message of a wait that gave up.
    #[arg(long)]
    pub service: Option<String>,
    /// Where a wait that gave up writes its termination message; written
    /// only if the file exists (the kubelet mounts it in a container).
    #[arg(long, value_name = "FILE", default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
}

/// Which cluster a command reads, as kubectl's flags choose it.
#[derive(Debug, Clone, Default, Args)]
pub struct ClusterArgs {
    /// The kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else
    /// the in-cluster service account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current-context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:8443", env = "DLJOB_LISTEN")]
    pub listen: SocketAddr,
    /// PEM certificate chain. Re-read when it changes (rotation without
    /// restart). Without it, a self-signed certificate for localhost and
    /// 127.0.0.1 is generated and its CA written to a file named in the log.
    #[arg(long, requires = "tls_key", env = "DLJOB_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key matching --tls-cert.
    #[arg(long, requires = "tls_cert", env = "DLJOB_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Config file (YAML; its keys are in docs/reference/config.md, and a
    /// misspelt one is refused with the list). Re-read when it changes; an
    /// invalid new version is logged and the old one kept.
    #[arg(long, env = "DLJOB_CONFIG")]
    pub config: Option<PathBuf>,
    /// Log format: text, or one JSON object per line.
    #[arg(long, value_enum, default_value = "text", env = "DLJOB_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Largest AdmissionReview body accepted, in bytes (UPDATE reviews carry
    /// two objects).
    #[arg(long, default_value_t = 3 * 1024 * 1024, env = "DLJOB_MAX_BODY_BYTES")]
    pub max_body_bytes: usize,
    /// Seconds a client may take to send its request before it is answered
    /// with 408 and disconnected; also how long it may take to receive an
    /// answer whole, and how long a write to it may make no progress,
    /// before its connection is closed.
    #[arg(long, default_value_t = 10, env = "DLJOB_READ_TIMEOUT_SECS")]
    pub read_timeout_secs: u64,
    /// Bytes of bodies over 256 KiB held at once, over every connection: a
    /// request waits for room (then 503), so that many slow large bodies
    /// cannot exhaust the replica's memory; such reviews are computed one
    /// at a time. Bodies of at most 256 KiB (every ordinary review) have
    /// 8 MiB of their own and must arrive within 2 s. At least
    /// --max-body-bytes.
    #[arg(long, default_value_t = 6 * 1024 * 1024, env = "DLJOB_MAX_BODY_BYTES_IN_FLIGHT")]
    pub max_body_bytes_in_flight: usize,
    /// Client connections open at once, so that idle or slow clients
    /// cannot exhaust the replica's memory; the API server needs a few
    /// (HTTP/2, 16 streams each). At the cap a new connection takes the
    /// place of the one waiting longest on its client (idle, or not taking
    /// its answers); it is closed at once only when every connection is
    /// busy (both counted in dljob_webhook_connections_closed_total).
    #[arg(long, default_value_t = 192, value_parser = clap::value_parser!(u32).range(1..), env = "DLJOB_MAX_CONNECTIONS")]
    pub max_connections: u32,
    /// Seconds from accepting a connection (TLS handshake included) to its
    /// first request; a connection that sends none is closed.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..), env = "DLJOB_FIRST_REQUEST_TIMEOUT_SECS")]
    pub first_request_timeout_secs: u64,
    /// Serve /metrics on this address instead, over plain HTTP (e.g.
    /// 0.0.0.0:9090), so that the webhook port can be opened to the API
    /// server alone (deploy/ does, with a NetworkPolicy). Unset: /metrics is
    /// served on --listen with the reviews. /healthz and /readyz are
    /// served there too.
    #[arg(long, env = "DLJOB_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// PEM CA bundle: require a client certificate it signed on the
    /// webhook port (mutual TLS), so that only the API server (configured
    /// with such a certificate, docs/client-certificate.md) gets answers. With it,
    /// denials name the job's other members and their values; without it
    /// they do not, since whoever reaches the port could ask about any
    /// namespace. Re-read every 2 s when it changes (a CA rotation); a file
    /// that is no CA is logged and the last good one kept. Needs
    /// --metrics-listen: the kubelet's probes, which present no
    /// certificate, go there (/healthz, /readyz).
    #[arg(
        long,
        env = "DLJOB_CLIENT_CA",
        value_name = "FILE",
        requires = "metrics_listen"
    )]
    pub client_ca: Option<PathBuf>,
    /// Seconds a connection may stay open between requests. Keep it above
    /// the client's own idle timeout (the API server's is 90 s), so that it
    /// closes first and no request races the close.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..), env = "DLJOB_IDLE_TIMEOUT_SECS")]
    pub idle_timeout_secs: u64,
    /// Where the self-signed CA is kept (without --tls-cert), its key beside
    /// it (.key): reused while valid, so that a cluster told to trust it
    /// keeps trusting the webhook across restarts; made anew when missing
    /// or expiring.
    #[arg(long, default_value = "dljob-ca.pem", env = "DLJOB_SELF_SIGNED_CA_OUT")]
    pub self_signed_ca_out: PathBuf,
    /// Extra DNS name or IP address for the self-signed certificate (besides
    /// localhost and 127.0.0.1), e.g. the address a cluster's API server
    /// uses to reach this machine. Repeatable; in the environment variable,
    /// comma-separated.
    #[arg(
        long = "self-signed-san",
        value_name = "DNS|IP",
        env = "DLJOB_SELF_SIGNED_SANS",
        value_delimiter = ','
    )]
    pub self_signed_sans: Vec<String>,
    /// Seconds to keep serving reviews after SIGTERM while /readyz answers
    /// 503, so that the API server stops sending reviews here before the
    /// listener closes (a rollout then drops none); in-flight reviews get
    /// up to 25 s more. Keep terminationGracePeriodSeconds above the sum.
    /// A second Ctrl-C or SIGTERM stops at once.
    #[arg(long, default_value_t = 10, env = "DLJOB_DRAIN_SECONDS")]
    pub drain_seconds: u64,
    /// Log every review at INFO. By default only denials and reviews with
    /// warnings are logged at INFO (errors, reloads and leadership always
    /// are); the others at DEBUG (RUST_LOG=debug).
    #[arg(long, env = "DLJOB_LOG_REVIEWS")]
    pub log_reviews: bool,
    /// The image of the init container dljob-wait-for-names that member
    /// pods get (dljob's own image, whose /dljob this binary is). Unset:
    /// the image of this pod's container named dljob, read from the API
    /// server at start (POD_NAME and POD_NAMESPACE from the downward API, as
    /// deploy/ sets them), else this release's image. The config's
    /// waitForNamesImage wins over both.
    #[arg(long, value_name = "IMAGE", env = "DLJOB_WAIT_FOR_NAMES_IMAGE")]
    pub wait_for_names_image: Option<String>,
    /// Run only the reconciler (development against a cluster).
    #[arg(long, conflicts_with = "no_reconciler", env = "DLJOB_NO_WEBHOOK")]
    pub no_webhook: bool,
    /// Run only the webhook, even when a cluster is reachable.
    #[arg(long, env = "DLJOB_NO_RECONCILER")]
    pub no_reconciler: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ManifestArgs {
    /// Manifest file (multi-document YAML), a directory (its .yaml, .yml
    /// and .json files, as kubectl reads them), or - for standard input.
    #[arg(short = 'f', long = "filename", value_name = "FILE|DIR|-")]
    pub file: String,
    /// Config file, as for `serve`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Namespace for objects that name none (what kubectl would use).
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
}

#[derive(Debug, Clone, Args)]
pub struct MutateArgs {
    #[command(flatten)]
    pub manifest: ManifestArgs,
    /// Print the pods the members create instead of the manifests: plain
    /// Pods as admitted, and for each StatefulSet ordinal and Indexed Job
    /// completion index the pod its controller creates from the mutated
    /// template, mutated again as admission does at pod creation (the env,
    /// hostname and hostfile each replica gets). Other documents are left
    /// out.
    #[arg(long, conflicts_with = "owned")]
    pub pods: bool,
    /// Print the objects the reconciler creates for each job of the
    /// manifests instead: its DLJob, the headless Service, the gang
    /// scheduler's PodGroup, the TensorBoard, and for mpi and chainer the
    /// SSH Secret the pods mount (with a key made for this run; in the
    /// cluster the reconciler makes the job's own). For review: their
    /// owner references carry no uid (the API server gives the DLJob one),
    /// so they are not for `kubectl apply`.
    #[arg(long)]
    pub owned: bool,
}

/// `dljob label`'s arguments (its help is on [`Command::Label`]).
#[derive(Debug, Clone, Args)]
pub struct LabelArgs {
    #[command(flatten)]
    pub manifest: ManifestArgs,
    /// The job name (dljob.dev/job).
    #[arg(long)]
    pub job: String,
    /// The framework (dljob.dev/framework): tensorflow, pytorch, mxnet,
    /// mpi, chainer, jax, xgboost, paddle or generic.
    #[arg(long)]
    pub framework: String,
    /// The role of one member, e.g. --role StatefulSet/train=worker.
    /// Repeatable.
    #[arg(long = "role", value_name = "KIND/NAME=ROLE")]
    pub roles: Vec<String>,
    /// A job-wide policy for every member, the key with or without the
    /// dljob.dev/ prefix: port, slots, mpi-implementation, elastic,
    /// restart-policy, backoff-limit, clean-pod-policy,
    /// ttl-seconds-after-finished, active-deadline-seconds, ssh-path, gang,
    /// queue, topology, restart-scope, tensorboard, compat. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Rewrite the file (each file of a directory) instead of printing;
    /// files with nothing to change are not touched. Not with -f -.
    #[arg(long)]
    pub in_place: bool,
}

/// `dljob convert`'s arguments (its help is on [`Command::Convert`]).
#[derive(Debug, Clone, Args)]
pub struct ConvertArgs {
    #[command(flatten)]
    pub manifest: ManifestArgs,
    /// Rewrite the file (each file of a directory, not its subdirectories)
    /// instead of printing; files with no job to convert are not touched.
    /// YAML files only: a JSON file with a job is refused, nothing written.
    /// Not with -f -.
    #[arg(long)]
    pub in_place: bool,
    /// A file (or directory, or - for standard input) of Kubeflow Trainer
    /// runtimes (ClusterTrainingRuntime, TrainingRuntime) for the TrainJobs
    /// to convert, e.g. what `kubectl get clustertrainingruntime NAME -o
    /// yaml` prints; repeat for more. Read only, never rewritten; a runtime
    /// in the -f input is found too. Other documents here are refused.
    #[arg(long = "runtime", value_name = "FILE|DIR|-")]
    pub runtimes: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct CertsArgs {
    /// Namespace of the webhook Service.
    #[arg(long, default_value = "dljob-system")]
    pub namespace: String,
    /// Name of the webhook Service.
    #[arg(long, default_value = "dljob")]
    pub service: String,
    /// Output directory for ca.pem, tls.crt, tls.key and the kustomize inputs.
    #[arg(long, default_value = "certs")]
    pub out: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct RbacArgs {
    /// A namespace dljob works in (repeat for each).
    #[arg(
        short = 'n',
        long = "namespace",
        required = true,
        value_name = "NAMESPACE"
    )]
    pub namespaces: Vec<String>,
    /// The namespace of dljob's own service account.
    #[arg(long, default_value = "dljob-system")]
    pub service_account_namespace: String,
}

#[derive(Debug, Clone, Args)]
pub struct WebhookConfigArgs {
    /// Base URL of the webhook, e.g. https://192.0.2.10:8443.
    #[arg(long)]
    pub url: String,
    /// CA certificate (PEM) that signed the webhook's certificate.
    #[arg(long)]
    pub ca: Option<PathBuf>,
}

/// Parses a duration such as `10s`, `5m`, `2h`, `1d` or `1h30m` (whole
/// numbers, units s, m, h, d; at least one second).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration: write e.g. 10s, 5m, 2h or 1h30m");
    let mut total: u64 = 0;
    let mut digits = String::new();
    for ch in text.trim().chars() {
        if ch.is_ascii_digit() {
            digits.push(ch);
            continue;
        }
        let unit: u64 = match ch {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        total = n
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(bad)?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(format!(
            "{text:?} has no unit: write e.g. {digits}s or {digits}m"
        ));
    }
    if total == 0 {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_sums() {
        let ok = |s: &str| parse_duration(s).map(|d| d.as_secs());
        assert_eq!(ok("10s"), Ok(10));
        assert_eq!(ok("5m"), Ok(300));
        assert_eq!(ok("2h"), Ok(7200));
        assert_eq!(ok("1d"), Ok(86_400));
        assert_eq!(ok("1h30m"), Ok(5400));
        assert_eq!(
            ok("10"),
            Err("\"10\" has no unit: write e.g. 10s or 10m".to_owned())
        );
        for bad in ["", "0s", "5x", "m", "1.5h", "-5m", "99999999999999999999h"] {
            assert_eq!(
                ok(bad),
                Err(format!(
                    "{bad:?} is not a duration: write e.g. 10s, 5m, 2h or 1h30m"
                )),
                "{bad}"
            );
        }
    }
}
