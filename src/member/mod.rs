//! Parsing one object into a [`MemberSpec`]: which job it belongs to, its role,
//! index and everything the job's members must agree on. Every check that
//! needs no cluster state happens here, and all problems are reported at once.
//!
//! [`parse`] runs the steps in order; each lives with its idea: [`keys`]
//! (labels and annotations read as one), [`topology`], [`spec`] (the
//! job-wide keys), [`index`] (which replica a pod is), [`container`] (the
//! framework container). Pure.

mod container;
mod index;
mod keys;
mod spec;
mod topology;

pub(crate) use self::container::container_facts;
use self::container::{container, container_warning, slots_warning};
pub use self::container::{framework_container, pick_container, ContainerChoice, ContainerFacts};
pub use self::index::pod_owner;
use self::index::{index_offset, pod_index};
use self::keys::Meta;
use self::spec::{
    check_elastic_gang, check_gang, elastic, job_spec, ordered_start, pod_requests, wait_for_names,
};
use self::topology::{check_topology, topology, workload_size};
use crate::violation::{Rule, Violations};

use std::fmt;

use serde_json::Value;

use crate::config::Config;
use crate::contract::{self as c};
use crate::crd::JobSpec;
use crate::frameworks::{self, Framework};
use crate::object::{self, at, str_at, Kind};

/// Where a pod's index comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodOwner {
    /// A plain pod: `dljob.dev/index`.
    None,
    /// A StatefulSet pod: its ordinal.
    StatefulSet,
    /// An Indexed Job pod: its completion index.
    Job,
}
/// Everything dljob reads from one member object: what the whole job
/// agrees on ([`JobSpec`]) and what is this member's own.
#[derive(Clone)]
pub struct MemberSpec {
    pub kind: Kind,
    /// May be empty for `generateName` pods.
    pub name: String,
    pub namespace: String,
    pub job: String,
    pub role: String,
    /// `spec.framework`, resolved.
    pub framework: &'static dyn Framework,
    /// The job-wide keys; members agree when these are equal. Shared: the
    /// reconciler's index keeps one per job, not one per member.
    pub spec: std::sync::Arc<JobSpec>,
    /// The topology was not written but inferred from a workload's size.
    pub topology_inferred: bool,
    /// Pods: the replica index within the role.
    pub index: Option<u32>,
    /// Pods: who created it.
    pub owner: PodOwner,
    /// StatefulSet replicas or Job completions.
    pub size: Option<u32>,
    /// `dljob.dev/container`, when set.
    pub container: Option<String>,
    /// `dljob.dev/ordered-start`.
    pub ordered_start: bool,
    /// `dljob.dev/wait-for-names` (default true).
    pub wait_for_names: bool,
    /// `dljob.dev/index-offset`: a workload (or its pod) that is one of
    /// several sets of its role, covering indexes `offset..offset + size`.
    pub index_offset: Option<u32>,
    /// What one pod of this member requests, (resource, quantity) per
    /// container (requests, else limits) — kept for a workload or a plain
    /// pod when the gang scheduler's PodGroup wants `minResources`.
    pub pod_requests: Vec<(String, String)>,
    /// [`c::FINISHED_RUN`] on the object itself: left of a finished run (the
    /// uid of its DLJob).
    pub finished_run: Option<String>,
}
impl fmt::Debug for MemberSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemberSpec")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("job", &self.job)
            .field("role", &self.role)
            .field("framework", &self.framework.name())
            .field("topology", &self.spec.replicas.to_string())
            .field("index", &self.index)
            .field("size", &self.size)
            .field("port", &self.spec.port)
            .finish_non_exhaustive()
    }
}
/// A parsed member and the warnings parsing produced.
#[derive(Debug)]
pub struct Parsed {
    pub member: MemberSpec,
    pub warnings: Vec<String>,
}
/// What [`parse`] gives: the member, not a member (`None`), or why not.
pub type Parsing = Result<Option<Parsed>, Violations>;
/// Default mount path of the SSH Secret for mpi/chainer.
pub(crate) const DEFAULT_SSH_PATH: &str = "/root/.ssh";
/// Default hostfile slots per host.
pub(crate) const DEFAULT_SLOTS: u32 = 1;
/// The job label of an object (own metadata), if it is a member at all.
pub(crate) fn job_label(object: &Value) -> Option<&str> {
    object::meta_str(object, &[], "labels", c::JOB)
}
/// Parses `object` of `kind`. `Ok(None)`: not a member (no `dljob.dev/job`
/// label). `namespace` is the request's namespace, used when the object has
/// none (pods with `generateName` may arrive without one).
pub fn parse(kind: Kind, object: &Value, namespace: Option<&str>, config: &Config) -> Parsing {
    let Some(job) = job_label(object) else {
        return Ok(None);
    };
    let meta = Meta::of(kind, object);
    let mut v = Violations::default();
    let mut warnings = Vec::new();
    meta.disagreements(&mut v);
    meta.misplaced_keys(&mut v);
    meta.oversized(&mut v);
    meta.unknown_keys(&mut warnings);
    check_job_name(job, &mut v);
    let role = role(&meta, &mut v);
    let framework = framework(&meta, role, &mut v);
    let size = workload_size(kind, object, &meta, &mut v);
    let index_offset = index_offset(kind, object, &meta, &mut v);
    let declared = topology(kind, object, &meta, role, size, index_offset, &mut v);
    let topology = declared.as_ref().map(|d| &d.topology);
    let elastic = elastic(&meta, framework, topology, &mut v);
    // This member's role, where it is the one that resizes.
    let resizable = framework
        .zip(topology)
        .and_then(|(f, t)| frameworks::ElasticRole::of(f, t, elastic))
        .filter(|e| Some(e.role) == role);
    if let Some(d) = &declared {
        let sizes = (size, index_offset, resizable.as_ref());
        check_topology(job, kind, framework, role, sizes, d, &mut v);
    }
    let (index, owner) = match kind {
        Kind::Pod => {
            let offsets = (index_offset, resizable.as_ref());
            pod_index(object, &meta, role, topology, offsets, &mut v)
        }
        _ => (None, PodOwner::None),
    };
    let spec = job_spec(&meta, framework, topology, elastic, config, &mut v);
    if let Some(spec) = &spec {
        check_gang(kind, &meta, spec, &mut v);
        if let (Some(r), Some(_)) = (role, &resizable) {
            // How far into the role this member reaches.
            let reach = match kind {
                Kind::Pod => index.map(|i| i + 1),
                _ => size.map(|n| n.saturating_add(index_offset.unwrap_or(0))),
            };
            let declared = spec.replicas.count_or_zero(r);
            check_elastic_gang((r, declared), reach, spec, &mut v);
        }
    }
    let ordered_start = ordered_start(&meta, &mut v);
    let wait_for_names = wait_for_names(&meta, &mut v);
    let container = container(kind, object, &meta, &mut v);

    if !v.is_empty() {
        return Err(v);
    }
    // Everything below was checked above.
    let (Some(framework), Some(role), Some(declared), Some(spec)) =
        (framework, role, declared, spec)
    else {
        unreachable!("missing pieces are violations");
    };
    let namespace = str_at(object, &["metadata", "namespace"])
        .filter(|s| !s.is_empty())
        .or(namespace)
        .unwrap_or("default");
    let wants_resources = spec.scheduler().is_some_and(|s| s.wants_min_resources());
    let pod_requests = if wants_resources && owner == PodOwner::None {
        pod_requests(kind, object)
    } else {
        Vec::new()
    };
    let member = MemberSpec {
        kind,
        name: str_at(object, &["metadata", "name"])
            .unwrap_or("")
            .to_owned(),
        namespace: namespace.to_owned(),
        job: job.to_owned(),
        role: role.to_owned(),
        framework,
        spec: std::sync::Arc::new(spec),
        topology_inferred: declared.inferred,
        index,
        owner,
        size,
        container,
        ordered_start,
        wait_for_names,
        index_offset,
        pod_requests,
        finished_run: object::meta_str(object, &[], "annotations", c::FINISHED_RUN)
            .map(str::to_owned),
    };
    slots_warning(&member, object, &mut warnings);
    container_warning(&member, object, &mut warnings);
    pinned_launcher_warning(&member, object, config, &mut warnings);
    ssh_user_warnings(&member, object, &mut warnings);
    sshd_command_warning(&member, object, &mut warnings);
    env_from_warning(&member, object, &mut warnings);
    intel_slots_warning(&member, object, &mut warnings);
    volcano_dns_warning(&member, object, &mut warnings);
    Ok(Some(Parsed { member, warnings }))
}

/// The port an sshd command line gives (`-p N`, `-pN`, `-o Port=N`,
/// `-oPort=N`), if any; the words may be one `sh -c` script.
fn sshd_port(words: &[&str]) -> Option<u16> {
    let words: Vec<&str> = words.iter().flat_map(|w| w.split_whitespace()).collect();
    // sshd's own arguments: after a word that runs it, to the end of that
    // command.
    let runs = |w: &&str| !w.ends_with(';') && w.ends_with("sshd");
    let separator = |w: &str| w.ends_with(';') || matches!(w, "&&" | "||" | "&" | "|");
    for (start, _) in words.iter().enumerate().filter(|(_, w)| runs(w)) {
        let args = &words[start + 1..];
        let end = args
            .iter()
            .position(|w| separator(w))
            .map_or(args.len(), |e| e + 1);
        let args = &args[..end];
        for (i, w) in args.iter().enumerate() {
            let next = args.get(i + 1).copied();
            let value = match *w {
                "-p" => next,
                "-o" => next.and_then(|n| n.strip_prefix("Port=")),
                _ => w
                    .strip_prefix("-oPort=")
                    .or_else(|| w.strip_prefix("-p").filter(|v| !v.is_empty())),
            };
            if let Some(port) = value.and_then(|v| v.trim_end_matches(';').parse().ok()) {
                return Some(port);
            }
        }
    }
    None
}

/// The pod (or pod template) the user wrote and its framework container,
/// for the warnings said where the user writes them: `None` for a pod a
/// StatefulSet or Job made (its template was told).
fn written_framework_container<'v>(
    m: &MemberSpec,
    object: &'v Value,
) -> Option<(&'v Value, &'v Value)> {
    if m.owner != PodOwner::None {
        return None;
    }
    let pod = at(object, m.kind.pod_path())?;
    let i = framework_container(m, pod)?;
    Some((pod, &object::containers(&pod["spec"])[i]))
}

/// A framework container with `envFrom`: a variable it brings that dljob
/// also sets (MASTER_ADDR, RANK, TF_CONFIG, …) is dljob's, because
/// Kubernetes gives `env` precedence over `envFrom` and dljob writes `env`.
/// A user's own `env` entry is kept instead (and said); one in a ConfigMap
/// or Secret is not seen. Said where the user writes the pod (or its
/// template).
fn env_from_warning(m: &MemberSpec, object: &Value, warnings: &mut Vec<String>) {
    let Some((_, container)) = written_framework_container(m, object) else {
        return;
    };
    let sources: Vec<String> = container
        .get("envFrom")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let (kind, r) = if let Some(r) = s.get("configMapRef") {
                ("ConfigMap", r)
            } else {
                ("Secret", s.get("secretRef")?)
            };
            Some(format!("{kind} {}", c::quoted(object::name_of(r))))
        })
        .collect();
    if sources.is_empty() {
        return;
    }
    warnings.push(format!(
        "container \"{}\" takes env from {} (envFrom); a variable there that dljob also sets is dljob's, since env comes before envFrom: to keep your value, set it in the container's env, which dljob keeps",
        c::quoted(object::name_of(container)),
        sources.join(", ")
    ));
}

/// Under `dljob.dev/compat: volcano`: a pod whose DNS has no search path
/// through the namespace's Service domain, where Volcano's host names
/// (`<host>.<job>`, in its env and /etc/volcano) resolve. Said where the
/// user writes the pod (or its template).
fn volcano_dns_warning(m: &MemberSpec, object: &Value, warnings: &mut Vec<String>) {
    if c::volcano_task(m.spec.compat.as_deref(), &m.role).is_none() {
        return;
    }
    let Some(pod) = at(object, m.kind.pod_path()) else {
        return;
    };
    if m.owner != PodOwner::None {
        return;
    }
    let spec = &pod["spec"];
    let policy = spec["dnsPolicy"].as_str().unwrap_or("ClusterFirst");
    let host_network = spec["hostNetwork"] == true;
    let searched = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_network,
        // Its own searches: the namespace's Service domain among them?
        "None" => spec
            .pointer("/dnsConfig/searches")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .any(|d| d.starts_with(&format!("{}.svc.", m.namespace))),
        _ => false,
    };
    if !searched {
        warnings.push(format!(
            "dnsPolicy {policy}{}: the pod's DNS does not search {}.svc.<cluster domain>, so Volcano's host names (<host>.{}, in VC_*_HOSTS and /etc/volcano) do not resolve in it; use dnsPolicy ClusterFirst (ClusterFirstWithHostNet with hostNetwork), or list that domain in dnsConfig.searches",
            if host_network { " with hostNetwork" } else { "" },
            m.namespace,
            m.job
        ));
    }
}

/// mpi/chainer: a member the launcher reaches over ssh whose framework
/// container's command does not start sshd. Said where the user writes the
/// pod (or its template).
fn sshd_command_warning(m: &MemberSpec, object: &Value, warnings: &mut Vec<String>) {
    let Some(client) = m.framework.ssh_client_role() else {
        return;
    };
    if m.role == client {
        return;
    }
    let Some((_, container)) = written_framework_container(m, object) else {
        return;
    };
    let words: Vec<&str> = ["command", "args"]
        .iter()
        .filter_map(|k| container.get(*k).and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    // Where sshd is told its port on the command line, the launcher's ssh
    // must dial it: dljob's ssh config says the job's port (not under the
    // MPI operator's layout, whose images' own client config says theirs).
    let listens = sshd_port(&words);
    let dialed = m.spec.compat.as_deref() != Some(c::COMPAT_MPI_OPERATOR);
    if let (Some(port), true) = (listens, dialed) {
        if port != m.spec.port {
            warnings.push(format!(
                "the {}'s sshd listens on port {port} (its command line) but the job's port is {} ({}), which the {client}'s ssh dials: set {}: \"{port}\" on every member",
                m.role,
                m.spec.port,
                c::PORT,
                c::PORT
            ));
        }
    }
    // None: the image's default command, which may well be sshd.
    if words.is_empty() || words.iter().any(|w| w.contains("sshd")) {
        return;
    }
    let shown = c::cut(&words.join(" "), c::MAX_QUOTED).into_owned();
    if runs_what_it_says(&words) {
        warnings.push(format!(
            "the {}'s framework container runs \"{shown}\", which does not start sshd; the {client} reaches it over ssh and would be refused: run /usr/sbin/sshd -De (in the foreground), as the MPI operator's workers do",
            m.role
        ));
    } else {
        // A script file or an entrypoint of the image's: what it runs is
        // not on the command line.
        warnings.push(format!(
            "the {}'s framework container runs \"{shown}\", and dljob cannot tell whether that starts sshd; the {client} reaches it over ssh: make sure it runs sshd in the foreground (/usr/sbin/sshd -De)",
            m.role
        ));
    }
}

/// Whether a command line says all it runs: a shell's inline script
/// (`sh -c '…'`), or a program that is not a script of the image's
/// (Python and the launchers, `sleep`). A shell given a file, or any other
/// executable (an entrypoint script), may start sshd out of sight.
fn runs_what_it_says(words: &[&str]) -> bool {
    let name = |w: &str| w.rsplit('/').next().unwrap_or(w).to_owned();
    let Some(first) = words.first().map(|w| name(w)) else {
        return false;
    };
    let shell = matches!(
        first.as_str(),
        "sh" | "bash" | "dash" | "ash" | "zsh" | "ksh"
    );
    if shell {
        // `-c` (or a flag group holding c, as `-ec`) before the script.
        return words[1..]
            .iter()
            .take_while(|w| w.starts_with('-'))
            .any(|w| !w.starts_with("--") && w.contains('c'));
    }
    first.starts_with("python")
        || matches!(
            first.as_str(),
            "sleep" | "torchrun" | "horovodrun" | "deepspeed" | "accelerate" | "true" | "tail"
        )
}

/// mpi/chainer: whether the user the framework container runs as can use
/// the SSH Secret's files as the kubelet mounts them — root-owned, 0600;
/// with a pod `fsGroup`, 0640 in that group. sshd and ssh read them as the
/// container's user: a non-root user needs the fsGroup to read them, and
/// root's ssh refuses a private key its group can read ("bad
/// permissions"). Said where the user writes the pod (or its template).
fn ssh_user_warnings(m: &MemberSpec, object: &Value, warnings: &mut Vec<String>) {
    let Some(client) = m.framework.ssh_client_role() else {
        return;
    };
    let Some((pod, container)) = written_framework_container(m, object) else {
        return;
    };
    let pod_ctx = &pod["spec"]["securityContext"];
    let ctx = &container["securityContext"];
    let setting = |key: &str| ctx.get(key).or_else(|| pod_ctx.get(key));
    let uid = setting("runAsUser").and_then(Value::as_i64);
    let non_root = setting("runAsNonRoot").and_then(Value::as_bool) == Some(true);
    let fs_group = pod_ctx.get("fsGroup").and_then(Value::as_i64);
    let reads = if m.role == client {
        "ssh cannot read the key and its config"
    } else {
        "sshd cannot read authorized_keys"
    };
    let user = match uid {
        Some(0) => None,
        Some(n) => Some(format!("uid {n}")),
        None if non_root => Some("a non-root user (runAsNonRoot)".to_owned()),
        None => None,
    };
    // The MPI operator's and Volcano's layout: world-readable files
    // outside /root/.ssh (the MPI operator's images' sshd runs with
    // StrictModes no).
    let compat = m.spec.compat.as_deref();
    let operator_modes = (compat == Some(c::COMPAT_MPI_OPERATOR)
        || c::volcano_task(compat, &m.role).is_some())
        && m.ssh_path() != DEFAULT_SSH_PATH;
    if let Some(user) = &user {
        if fs_group.is_none() && !operator_modes {
            warnings.push(format!(
                "the {}'s framework container runs as {user} and the pod sets no fsGroup: the SSH Secret's files are mounted root-owned and 0600, so {reads}; set spec.securityContext.fsGroup to the user's group (e.g. 1000): the kubelet then makes them 0640 in that group, which sshd and ssh accept",
                m.role
            ));
        }
        if m.ssh_path() == DEFAULT_SSH_PATH {
            warnings.push(format!(
                "the {}'s framework container runs as {user} but {} is {DEFAULT_SSH_PATH}: ssh and sshd read the .ssh directory of the user they run as; set {} to that user's (e.g. /home/mpiuser/.ssh) on every member",
                m.role,
                c::SSH_PATH,
                c::SSH_PATH
            ));
        }
    } else if let (Some(group), true) = (fs_group, m.role == client) {
        warnings.push(format!(
            "the {} sets fsGroup {group} and its framework container runs as root{}: the kubelet makes the SSH private key 0640 in group {group}, and root's ssh refuses a key its group can read (\"bad permissions\"); run the container as the non-root user the fsGroup is for (runAsUser), or leave fsGroup out",
            m.role,
            if uid.is_none() { " (unless its image's USER is another)" } else { "" }
        ));
    }
}

/// `spec.nodeName` of a pod, or of a workload's pod template: a pod bound
/// to its node by its author, which no scheduler (and no scheduling gate)
/// holds back.
pub(crate) fn pinned_node(kind: Kind, object: &Value) -> Option<&str> {
    at(object, kind.pod_path())
        .and_then(|p| str_at(p, &["spec", "nodeName"]))
        .filter(|n| !n.is_empty())
}

/// An Intel MPI launcher of a job whose hosts have different slot counts:
/// Intel's mpiexec reads per-host counts only from a `-machinefile`; from
/// the hostfile dljob points it at (`I_MPI_HYDRA_HOST_FILE`, as `-f`) it
/// takes the hosts and places `I_MPI_PERHOST` ranks on each, which dljob
/// can set only for one count (conformance/test_hydra.py shows both).
fn intel_slots_warning(m: &MemberSpec, object: &Value, warnings: &mut Vec<String>) {
    if m.spec.mpi_implementation != Some(c::MpiImplementation::Intel)
        || m.spec.slots.is_uniform()
        || m.framework.ssh_client_role() != Some(m.role.as_str())
    {
        return;
    }
    let Some((_, container)) = written_framework_container(m, object) else {
        return;
    };
    let words = ["command", "args"]
        .iter()
        .filter_map(|k| container[*k].as_array())
        .flatten()
        .filter_map(Value::as_str);
    if words
        .flat_map(str::split_whitespace)
        .any(|w| w == "-machinefile" || w == "-machine")
    {
        return;
    }
    warnings.push(format!(
        "{} gives hosts different slot counts, which Intel MPI's mpiexec reads only from a machine file: run `mpiexec -machinefile {} -n $DLJOB_MPI_NP …`; from the hostfile alone it places the same number of ranks on every host",
        c::SLOTS,
        c::HOSTFILE_PATH
    ));
}

/// A member of the role dljob holds back until the other members run (the
/// mpi launcher) that names its node: the API server refuses a pod with
/// both `spec.nodeName` and a scheduling gate, so dljob adds no gate to it
/// and says what that costs.
fn pinned_launcher_warning(
    m: &MemberSpec,
    object: &Value,
    config: &Config,
    warnings: &mut Vec<String>,
) {
    if !config.launcher_gate() || m.framework.gated_role() != Some(m.role.as_str()) {
        return;
    }
    if let Some(node) = pinned_node(m.kind, object) {
        warnings.push(format!(
            "the {} sets spec.nodeName \"{node}\": the API server refuses a pod bound to a node that also has a scheduling gate, so dljob does not hold it back with {} until the workers run; it may start before their sshd listens (ssh retries ConnectionAttempts=10 times). Leave nodeName out and use a nodeSelector or node affinity to keep the wait",
            m.role,
            c::WORKERS_READY_GATE
        ));
    }
}
fn check_job_name(job: &str, v: &mut Violations) {
    if !c::is_dns1035_label(job) || job.len() > c::MAX_JOB_NAME {
        v.push(Rule::InvalidJobName, format!(
            "{} \"{job}\" is not a valid job name: use at most {} lowercase letters, digits and '-', starting with a letter (it names the Service and every pod's hostname)",
            c::JOB,
            c::MAX_JOB_NAME
        ));
    }
}
/// `dljob.dev/role` (a label; an annotation of that name is reported as
/// misplaced by [`Meta::misplaced_keys`]).
fn role<'v>(meta: &Meta<'v>, v: &mut Violations) -> Option<&'v str> {
    let role = meta.label(c::ROLE);
    if role.is_none() && meta.annotation(c::ROLE).is_none() {
        v.push(
            Rule::MissingRole,
            format!("label {} is missing: every member names its role", c::ROLE),
        );
    }
    role
}
/// `dljob.dev/framework`, and whether it has the member's role.
fn framework(
    meta: &Meta<'_>,
    role: Option<&str>,
    v: &mut Violations,
) -> Option<&'static dyn Framework> {
    let framework = match meta.annotation(c::FRAMEWORK) {
        None if meta.label(c::FRAMEWORK).is_some() => None, // misplaced_keys says it
        None => {
            v.push(
                Rule::MissingFramework,
                format!(
                    "annotation {} is missing; set one of {}",
                    c::FRAMEWORK,
                    frameworks::names()
                ),
            );
            None
        }
        Some(name) => {
            let f = frameworks::by_name(name);
            if f.is_none() {
                v.push(Rule::UnknownFramework, {
                    let name = c::quoted(name);
                    format!(
                        "{}: unknown framework \"{name}\"; frameworks are {}",
                        c::FRAMEWORK,
                        frameworks::names()
                    )
                });
            }
            f
        }
    };
    if let (Some(f), Some(r)) = (framework, role) {
        if let Err(e) = frameworks::check_role(f, r) {
            v.push(Rule::UnknownRole, e);
        }
    }
    framework
}
impl MemberSpec {
    /// The framework's view of the job.
    pub(crate) fn job_view<'a>(&'a self, config: &'a Config) -> frameworks::JobView<'a> {
        frameworks::JobView {
            name: &self.job,
            namespace: &self.namespace,
            cluster_domain: &config.cluster_domain,
            topology: &self.spec.replicas,
            port: self.spec.port,
            slots: &self.spec.slots,
            elastic: self.spec.elastic,
            backoff_limit: self.spec.policies.backoff_limit,
            compat: self.spec.compat.as_deref(),
            mpi: self.spec.mpi_implementation.unwrap_or_default(),
        }
    }

    /// Where the SSH Secret is mounted (mpi/chainer).
    pub(crate) fn ssh_path(&self) -> &str {
        self.spec.ssh_path.as_deref().unwrap_or(DEFAULT_SSH_PATH)
    }
}
