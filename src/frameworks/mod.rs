//! Frameworks (ARCHITECTURE.md §3): one module each, behind one trait, registered in
//! [`ALL`]. A framework says which roles it has, which replica coordinates,
//! its default port, and the env vars a member gets — all pure functions of
//! the topology and the member.

use crate::contract::{push_u32, Elastic, RestartScope, Slots, Topology};

mod chainer;
mod generic;
mod jax;
mod mpi;
mod mxnet;
mod paddle;
mod pytorch;
mod tensorflow;
mod xgboost;

/// Every framework dljob knows, in the order `--help` lists them.
pub static ALL: &[&dyn Framework] = &[
    &tensorflow::TensorFlow,
    &pytorch::PyTorch,
    &mxnet::MxNet,
    &mpi::Mpi,
    &chainer::Chainer,
    &jax::Jax,
    &xgboost::XgBoost,
    &paddle::Paddle,
    &generic::Generic,
];

/// Looks a framework up by its `dljob.dev/framework` name.
pub fn by_name(name: &str) -> Option<&'static dyn Framework> {
    ALL.iter().copied().find(|f| f.name() == name)
}

/// "tensorflow, pytorch, …" for error messages.
pub(crate) fn names() -> String {
    ALL.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ")
}

/// How many replicas a role may have.
#[derive(Clone, Copy, Debug)]
pub struct RoleRule {
    pub name: &'static str,
    pub min: u32,
    pub max: Option<u32>,
}

impl RoleRule {
    pub(crate) const fn any(name: &'static str) -> Self {
        Self {
            name,
            min: 0,
            max: None,
        }
    }
    pub(crate) const fn at_most_one(name: &'static str) -> Self {
        Self {
            name,
            min: 0,
            max: Some(1),
        }
    }
    pub(crate) const fn exactly_one(name: &'static str) -> Self {
        Self {
            name,
            min: 1,
            max: Some(1),
        }
    }
    pub(crate) const fn at_least_one(name: &'static str) -> Self {
        Self {
            name,
            min: 1,
            max: None,
        }
    }
}

/// The roles a framework accepts.
#[derive(Clone, Copy, Debug)]
pub enum Roles {
    /// Only these, coordinator first; rank order follows this list.
    Fixed(&'static [RoleRule]),
    /// Any DNS-label role; rank order is the topology's declared order.
    Any,
}

/// The job as the frameworks see it.
#[derive(Clone, Copy, Debug)]
pub struct JobView<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    /// Empty, or a domain appended to `…svc`.
    pub cluster_domain: &'a str,
    pub topology: &'a Topology,
    pub port: u16,
    /// Hostfile slots per host.
    pub slots: &'a Slots,
    pub elastic: Option<Elastic>,
    /// `dljob.dev/backoff-limit`: the retries the job allows. An elastic
    /// launcher restarts its workers in place up to this many times.
    pub backoff_limit: u32,
    /// `dljob.dev/compat`: the operator whose images the pods run.
    pub compat: Option<&'a str>,
    /// `dljob.dev/mpi-implementation` (mpi, chainer): the hostfile's form
    /// and the launcher's env.
    pub mpi: crate::contract::MpiImplementation,
}

/// The member being wired, as the frameworks see it.
#[derive(Clone, Copy, Debug)]
pub struct Member<'a> {
    pub role: &'a str,
    pub index: u32,
    /// GPUs the framework container requests (limits, else requests).
    pub gpus: Option<u32>,
    /// Whether the pod is on its node's network (`hostNetwork`): its host
    /// name is then the node's, not its own.
    pub host_network: bool,
}

/// Env vars in injection order.
pub(crate) type Env = Vec<(String, String)>;

/// One framework.
pub trait Framework: Sync {
    /// The `dljob.dev/framework` value.
    fn name(&self) -> &'static str;
    /// Accepted roles, coordinator first.
    fn roles(&self) -> Roles;
    /// Port used when neither the config nor `dljob.dev/port` overrides it.
    fn default_port(&self) -> u16;
    /// The replica whose exit code decides the job: (role, index).
    fn coordinator<'t>(&self, topology: &'t Topology) -> Option<(&'t str, u32)>;
    /// Framework env vars for `member` (the generic `DLJOB_*` vars are added
    /// by the caller).
    fn env(&self, job: &JobView<'_>, member: &Member<'_>, env: &mut Env);
    /// What an operator's images for this framework read besides
    /// [`Framework::env`], for a job with `dljob.dev/compat: COMPAT`
    /// (`job.compat`): the operator's own names for the same wiring.
    fn compat_env(&self, _job: &JobView<'_>, _member: &Member<'_>, _env: &mut Env) {}
    /// Topology rules beyond per-role counts; messages name the fix.
    fn check_topology(&self, _topology: &Topology) -> Vec<String> {
        Vec::new()
    }
    /// The MPI hostfile for `member`, where the member runs a launcher that
    /// reads one (mpi's launcher, chainer's master); `None` elsewhere. Other
    /// frameworks read no hostfile, and every host is a pure function of the
    /// topology (`DLJOB_HOST_PATTERN`, `DLJOB_REPLICAS`).
    fn hostfile(&self, _job: &JobView<'_>, _member: &Member<'_>) -> Option<String> {
        None
    }
    /// Env vars taken from the pod by the downward API, as (name, fieldPath),
    /// injected before [`Framework::env`]'s so that its values can refer to
    /// them as `$(NAME)`.
    fn field_env(
        &self,
        _job: &JobView<'_>,
        _member: &Member<'_>,
    ) -> &'static [(&'static str, &'static str)] {
        &[]
    }
    /// Whether the framework takes `dljob.dev/slots` from the hostfile
    /// launcher's point of view (mpi, chainer): warn when GPUs ≠ slots.
    fn uses_slots(&self) -> bool {
        false
    }
    /// The role that runs `mpirun` and reaches the others over SSH (mpi's
    /// launcher, chainer's master), for frameworks whose members use SSH:
    /// the job then gets an SSH key Secret, whole in this role's pods (the
    /// private key and the client config), only `authorized_keys` in the
    /// others' (their sshd's).
    fn ssh_client_role(&self) -> Option<&'static str> {
        None
    }
    /// Under `dljob.dev/compat: volcano`, the role that Volcano's mpi
    /// plugin gives `MPI_HOST` (the workers, comma-separated): the mpi
    /// launcher; no other framework is the mpi plugin's.
    fn volcano_mpi_host_role(&self) -> Option<&'static str> {
        None
    }
    /// Whether members reach each other over SSH.
    fn uses_ssh(&self) -> bool {
        self.ssh_client_role().is_some()
    }
    /// The role whose replicas may come and go within `dljob.dev/elastic`
    /// (a `min:max` node range its launcher rendezvous on), where the
    /// framework takes it; every other role keeps its declared count.
    fn elastic_role(&self) -> Option<&'static str> {
        None
    }
    /// Whether the framework takes `dljob.dev/elastic`.
    fn elastic(&self) -> bool {
        self.elastic_role().is_some()
    }
    /// The role whose pods must not start before every other member runs
    /// (mpi's launcher, chainer's master: their `mpirun` reaches every
    /// worker's sshd at once). Its pods get the scheduling gate
    /// [`crate::contract::WORKERS_READY_GATE`] at admission, which the
    /// reconciler removes once the other members run.
    fn gated_role(&self) -> Option<&'static str> {
        None
    }
    /// What a retryable failure restarts when `dljob.dev/restart-scope` is
    /// not set: every member where one lost rank breaks the others'
    /// collectives (the default), the failed pod alone where the framework
    /// tolerates it (parameter servers, generic jobs).
    fn default_restart_scope(&self) -> RestartScope {
        RestartScope::Job
    }
}

/// The role of an elastic job that resizes (docs/frameworks/pytorch.md,
/// resizing): the framework's elastic role, which may have any count that
/// keeps the whole job within `dljob.dev/elastic` while the other roles
/// keep theirs, and at least 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElasticRole {
    pub role: &'static str,
    /// The replicas it may have.
    pub range: std::ops::RangeInclusive<u32>,
    pub elastic: Elastic,
    /// The replicas of the job's other roles.
    pub others: u32,
}

impl ElasticRole {
    /// The resizing role of a job of `topology` under `elastic`; None for a
    /// job that is not elastic or whose topology lacks the role.
    pub fn of(
        framework: &dyn Framework,
        topology: &Topology,
        elastic: Option<Elastic>,
    ) -> Option<Self> {
        let e = elastic?;
        let role = framework.elastic_role()?;
        let others = topology.total() - topology.count(role)?;
        let low = e.min.saturating_sub(others).max(1);
        let high = e.max.saturating_sub(others);
        (low <= high).then_some(Self {
            role,
            range: low..=high,
            elastic: e,
            others,
        })
    }

    /// The largest size.
    pub fn max(&self) -> u32 {
        *self.range.end()
    }

    /// `role "worker" may have 1 to 3 replicas under dljob.dev/elastic
    /// "2:4" (the job's other roles have 1)`.
    pub fn said(&self) -> String {
        format!(
            "role \"{}\" may have {} to {} replicas under {} \"{}\" (the job's other roles have {})",
            self.role,
            self.range.start(),
            self.range.end(),
            crate::contract::ELASTIC,
            self.elastic,
            self.others
        )
    }
}

/// "pytorch" — the frameworks that take `dljob.dev/elastic`, for messages.
pub(crate) fn elastic_names() -> String {
    ALL.iter()
        .filter(|f| f.elastic())
        .map(|f| f.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Roles of `topology` in rank order.
pub(crate) fn rank_order<'t, F: Framework + ?Sized>(
    framework: &F,
    topology: &'t Topology,
) -> Vec<&'t str> {
    match framework.roles() {
        Roles::Fixed(rules) => rules
            .iter()
            .filter_map(|rule| {
                topology
                    .roles()
                    .find(|(r, _)| *r == rule.name)
                    .map(|(r, _)| r)
            })
            .collect(),
        Roles::Any => topology.roles().map(|(r, _)| r).collect(),
    }
}

/// `topology` in rank order: equal for any two members whose topologies
/// give every replica the same rank (declared order only matters where the
/// framework leaves roles free).
pub(crate) fn in_rank_order<F: Framework + ?Sized>(framework: &F, topology: &Topology) -> Topology {
    topology.ordered_by(&rank_order(framework, topology))
}

/// Global rank of (role, index): replicas of earlier roles come first.
pub(crate) fn rank<F: Framework + ?Sized>(
    framework: &F,
    topology: &Topology,
    role: &str,
    index: u32,
) -> u32 {
    let mut before = 0;
    for r in rank_order(framework, topology) {
        if r == role {
            return before + index;
        }
        before += topology.count_or_zero(r);
    }
    before + index
}

/// Checks the topology against the framework's role rules and extra checks.
pub(crate) fn check_topology(framework: &dyn Framework, topology: &Topology) -> Vec<String> {
    let mut problems = Vec::new();
    if let Roles::Fixed(rules) = framework.roles() {
        for (role, n) in topology.roles() {
            match rules.iter().find(|r| r.name == role) {
                None => problems.push(format!(
                    "{}: role \"{role}\" is not a {} role; {} roles are {}",
                    crate::contract::REPLICAS,
                    framework.name(),
                    framework.name(),
                    role_list(rules)
                )),
                Some(rule) => {
                    if let Some(max) = rule.max {
                        if n > max {
                            problems.push(format!(
                                "{}: {} {role} replicas declared, but a {} job has {} {role}",
                                crate::contract::REPLICAS,
                                n,
                                framework.name(),
                                if rule.min == max {
                                    format!("exactly {max}")
                                } else {
                                    format!("at most {max}")
                                }
                            ));
                        }
                    }
                }
            }
        }
        for rule in rules.iter().filter(|r| r.min > 0) {
            if topology.count(rule.name).is_none() {
                problems.push(format!(
                    "{}: a {} job needs {} {} {} replica{}; add \"{}={}\"",
                    crate::contract::REPLICAS,
                    framework.name(),
                    if rule.max == Some(rule.min) {
                        "exactly"
                    } else {
                        "at least"
                    },
                    rule.min,
                    rule.name,
                    if rule.min == 1 { "" } else { "s" },
                    rule.name,
                    rule.min
                ));
            }
        }
    }
    problems.extend(framework.check_topology(topology));
    problems
}

/// "chief, master, worker, ps, evaluator" for error messages.
pub(crate) fn role_list(rules: &[RoleRule]) -> String {
    rules.iter().map(|r| r.name).collect::<Vec<_>>().join(", ")
}

/// Whether `role` is acceptable for the framework, else a message listing the valid roles.
pub(crate) fn check_role(framework: &dyn Framework, role: &str) -> Result<(), String> {
    match framework.roles() {
        Roles::Fixed(rules) if !rules.iter().any(|r| r.name == role) => Err(format!(
            "{}: \"{role}\" is not a {} role; use one of {}",
            crate::contract::ROLE,
            framework.name(),
            role_list(rules)
        )),
        Roles::Any if !crate::contract::is_dns_label(role) => Err(format!(
            "{}: \"{role}\" is not a DNS label (lowercase letters, digits and '-')",
            crate::contract::ROLE
        )),
        _ => Ok(()),
    }
}

impl JobView<'_> {
    /// Hostfile slots of (role, index): per worker index, else the count
    /// for every other host.
    pub(crate) fn slots_of(&self, role: &str, index: u32) -> u32 {
        if role == "worker" {
            self.slots.of_worker(index)
        } else {
            self.slots.default_count()
        }
    }

    /// Appends `j-r-i.j.ns.svc[.domain]` to `out`.
    pub(crate) fn push_host(&self, out: &mut String, role: &str, index: u32) {
        out.push_str(self.name);
        out.push('-');
        out.push_str(role);
        out.push('-');
        push_u32(out, index);
        out.push('.');
        out.push_str(self.name);
        out.push('.');
        out.push_str(self.namespace);
        out.push_str(".svc");
        if !self.cluster_domain.is_empty() {
            out.push('.');
            out.push_str(self.cluster_domain);
        }
    }

    /// `j-r-i.j.ns.svc[.domain]`.
    pub(crate) fn host(&self, role: &str, index: u32) -> String {
        let mut s = String::with_capacity(self.host_len_hint(role));
        self.push_host(&mut s, role, index);
        s
    }

    /// `j-r-i.j`: a pod's host name under the job's Service, as Volcano
    /// names its tasks' hosts. It resolves through the pod's DNS search
    /// path (the namespace's `svc` domain first), and is a third shorter
    /// than [`Self::host`]: Volcano's host lists of thousands fit where
    /// the full names would not.
    pub(crate) fn short_host(&self, role: &str, index: u32) -> String {
        let mut s = crate::contract::pod_hostname(self.name, role, index);
        s.push('.');
        s.push_str(self.name);
        s
    }

    /// Every host of `role` in [`Self::short_host`]'s form.
    pub(crate) fn short_hosts(&self, role: &str) -> Vec<String> {
        (0..self.topology.count_or_zero(role))
            .map(|i| self.short_host(role, i))
            .collect()
    }

    /// Every host as a pattern: `j-{role}-{index}.j.ns.svc[.domain]`.
    pub(crate) fn host_pattern(&self) -> String {
        let mut s = format!(
            "{}-{{role}}-{{index}}.{}.{}.svc",
            self.name, self.name, self.namespace
        );
        if !self.cluster_domain.is_empty() {
            s.push('.');
            s.push_str(self.cluster_domain);
        }
        s
    }

    /// `host:port`.
    pub(crate) fn host_port(&self, role: &str, index: u32) -> String {
        let mut s = String::with_capacity(self.host_len_hint(role) + 6);
        self.push_host(&mut s, role, index);
        s.push(':');
        push_u32(&mut s, self.port.into());
        s
    }

    fn host_len_hint(&self, role: &str) -> usize {
        2 * self.name.len() + role.len() + self.namespace.len() + self.cluster_domain.len() + 16
    }
}

/// Appends a hostfile line for every replica of `role`: a worker's slots
/// are its index's in `dljob.dev/slots`, any other host's the count for
/// every other host. Returns the slots listed.
pub(crate) fn push_hostfile_lines(out: &mut String, job: &JobView<'_>, role: &str) -> u32 {
    let n = job.topology.count_or_zero(role);
    out.reserve(n as usize * (job.host_len_hint(role) + 10));
    let mut total = 0u32;
    for i in 0..n {
        let slots = job.slots_of(role, i);
        job.push_host(out, role, i);
        push_slots(out, job, slots);
        total = total.saturating_add(slots);
    }
    total
}

/// Ends a hostfile line with its slots, as the job's MPI reads them:
/// OpenMPI's ` slots=N`, Hydra's `:N`.
fn push_slots(out: &mut String, job: &JobView<'_>, slots: u32) {
    out.push_str(if job.mpi.is_hydra() { ":" } else { " slots=" });
    push_u32(out, slots);
    out.push('\n');
}

/// The hostfile line of the pod that reads the hostfile (an MPI launcher
/// that runs ranks, chainer's master): by its own host name, which mpirun
/// knows for its own without a lookup and runs its ranks on itself. By the
/// Service's name, mpirun would look it up (a record published only once
/// the pod has an address, so maybe not yet at start) and, where it does
/// not resolve or PRRTE compares names without resolving them, ssh to
/// itself, where no sshd runs.
///
/// A pod on its node's network has the node's host name: it is listed by
/// the Service's name, which resolves to its node's (local) address.
pub(crate) fn push_own_hostfile_line(
    out: &mut String,
    job: &JobView<'_>,
    member: &Member<'_>,
) -> u32 {
    let role = member.role;
    let slots = job.slots_of(role, 0);
    if member.host_network {
        job.push_host(out, role, 0);
    } else {
        out.push_str(&crate::contract::pod_hostname(job.name, role, 0));
    }
    push_slots(out, job, slots);
    slots
}

/// The generic `DLJOB_*` vars every member gets. Their size does not grow
/// with the job: the other members' hosts follow from `DLJOB_REPLICAS` and
/// `DLJOB_HOST_PATTERN` (`{role}` and `{index}` placeholders, as Python's
/// `str.format` fills them); `DLJOB_COORDINATOR` names the coordinator's host.
pub(crate) fn generic_env(
    framework: &dyn Framework,
    job: &JobView<'_>,
    member: &Member<'_>,
    env: &mut Env,
) {
    let r = rank(framework, job.topology, member.role, member.index);
    env.push(("DLJOB_JOB".into(), job.name.to_owned()));
    env.push(("DLJOB_ROLE".into(), member.role.to_owned()));
    env.push(("DLJOB_INDEX".into(), member.index.to_string()));
    env.push(("DLJOB_RANK".into(), r.to_string()));
    env.push(("DLJOB_WORLD_SIZE".into(), job.topology.total().to_string()));
    let replicas = rank_order(framework, job.topology)
        .into_iter()
        .map(|role| format!("{role}={}", job.topology.count_or_zero(role)))
        .collect::<Vec<_>>()
        .join(",");
    env.push(("DLJOB_REPLICAS".into(), replicas));
    env.push(("DLJOB_HOST_PATTERN".into(), job.host_pattern()));
    if let Some((role, index)) = framework.coordinator(job.topology) {
        env.push(("DLJOB_COORDINATOR".into(), job.host(role, index)));
    }
}

/// What Volcano's job plugins give every pod, for a job with
/// `dljob.dev/compat: volcano`: the env plugin's task index (`VK_TASK_INDEX`,
/// `VC_TASK_INDEX`), the svc plugin's hosts and count of every task
/// (`VC_<TASK>_HOSTS`, `VC_<TASK>_NUM`, the task's name upper-cased with
/// `-` as `_`), and the mpi plugin's `MPI_HOST` (the workers) on an MPI
/// launcher. Hosts are the job's names.
pub(crate) fn volcano_env(
    framework: &dyn Framework,
    job: &JobView<'_>,
    member: &Member<'_>,
    env: &mut Env,
) {
    if crate::contract::volcano_task(job.compat, member.role).is_none() {
        return;
    }
    let index = member.index.to_string();
    env.push(("VK_TASK_INDEX".into(), index.clone()));
    env.push(("VC_TASK_INDEX".into(), index));
    for (name, value) in volcano_files(framework, job) {
        if name.starts_with("VC_") {
            env.push((name, value));
        }
    }
    if framework.volcano_mpi_host_role() == Some(member.role) {
        env.push(("MPI_HOST".into(), job.short_hosts("worker").join(",")));
    }
}

/// What Volcano's svc plugin puts in a job's ConfigMap, which it mounts
/// whole at /etc/volcano, per task (in the framework's role order): the
/// hosts one a line as `<task>.host`, the task's name with `-` as `_`
/// (Volcano 1.4 and later; dljob also writes the name as it is, as
/// Volcano did before), and as `VC_<TASK>_HOSTS` (comma-separated) and
/// `VC_<TASK>_NUM`, which it also sets as env. Hosts in Volcano's form,
/// [`JobView::short_host`]. Empty unless the job is under
/// `dljob.dev/compat: volcano`.
pub(crate) fn volcano_files(framework: &dyn Framework, job: &JobView<'_>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for role in rank_order(framework, job.topology) {
        let Some(task) = crate::contract::volcano_task(job.compat, role) else {
            continue;
        };
        let svc = task.replace('-', "_");
        let key = svc.to_uppercase();
        let hosts = job.short_hosts(role);
        out.push((format!("{svc}.host"), hosts.join("\n")));
        if svc != task {
            out.push((format!("{task}.host"), hosts.join("\n")));
        }
        out.push((format!("VC_{key}_HOSTS"), hosts.join(",")));
        out.push((format!("VC_{key}_NUM"), hosts.len().to_string()));
    }
    out
}

/// The coordinator rule of every framework but generic: replica 0 of the
/// first of `roles` the topology has.
pub(crate) fn first_replica_of<'t>(
    topology: &'t Topology,
    roles: &[&str],
) -> Option<(&'t str, u32)> {
    roles
        .iter()
        .find_map(|n| topology.roles().find(|(r, _)| r == n))
        .map(|(r, _)| (r, 0))
}

/// A JSON object whose keys keep the order they were pushed in (role order
/// in `TF_CONFIG`/`MX_CONFIG`, as the operators wrote them).
pub(crate) struct OrderedMap<'a, V>(pub Vec<(&'a str, V)>);

impl<V: serde::Serialize> serde::Serialize for OrderedMap<'_, V> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// `{"type": role, "index": i}` of `TF_CONFIG` and `MX_CONFIG`.
#[derive(serde::Serialize)]
pub(crate) struct Task<'a> {
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub index: u32,
}

/// Pushes one var.
pub(crate) fn set(env: &mut Env, name: &str, value: impl Into<String>) {
    env.push((name.to_owned(), value.into()));
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// One slot per host.
    pub(crate) static ONE_SLOT: std::sync::LazyLock<Slots> =
        std::sync::LazyLock::new(|| Slots::uniform(1));

    /// Job `j` in namespace `ns` with `topology`, port 1 and 1 slot.
    pub(crate) fn job(topology: &Topology) -> JobView<'_> {
        JobView {
            name: "j",
            namespace: "ns",
            cluster_domain: "",
            topology,
            port: 1,
            slots: &ONE_SLOT,
            elastic: None,
            backoff_limit: 3,
            compat: None,
            mpi: Default::default(),
        }
    }

    /// Env of `framework` for (role, index) in namespace `ns` (framework vars only).
    pub(crate) fn env_of(
        framework: &str,
        topology: &str,
        role: &str,
        index: u32,
        gpus: Option<u32>,
    ) -> Env {
        env_with(framework, topology, role, index, gpus, None)
    }

    pub(crate) fn env_with(
        framework: &str,
        topology: &str,
        role: &str,
        index: u32,
        gpus: Option<u32>,
        elastic: Option<Elastic>,
    ) -> Env {
        wired(
            framework,
            topology,
            Member {
                role,
                index,
                gpus,
                host_network: false,
            },
            elastic,
            None,
        )
    }

    /// [`env_of`] and, as under `dljob.dev/compat: COMPAT`, the operator's
    /// names after it.
    pub(crate) fn compat_env_of(
        compat: &'static str,
        framework: &str,
        topology: &str,
        role: &str,
        index: u32,
    ) -> Env {
        let member = Member {
            role,
            index,
            gpus: None,
            host_network: false,
        };
        wired(framework, topology, member, None, Some(compat))
    }

    /// The env `framework` gives `member` of job `j` in namespace `ns`
    /// (its default port, one slot a host, a backoff limit of 3), the
    /// compat env after it.
    fn wired(
        framework: &str,
        topology: &str,
        member: Member<'_>,
        elastic: Option<Elastic>,
        compat: Option<&'static str>,
    ) -> Env {
        let f = by_name(framework).unwrap();
        let topology = Topology::parse(topology).unwrap();
        let job = JobView {
            name: "j",
            namespace: "ns",
            cluster_domain: "",
            topology: &topology,
            port: f.default_port(),
            slots: &crate::contract::Slots::uniform(1),
            elastic,
            backoff_limit: 3,
            compat,
            mpi: Default::default(),
        };
        let mut env = Env::new();
        f.env(&job, &member, &mut env);
        f.compat_env(&job, &member, &mut env);
        env
    }

    pub(crate) fn get<'e>(env: &'e Env, name: &str) -> Option<&'e str> {
        env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_knows_every_framework_of_the_contract() {
        assert_eq!(
            names(),
            "tensorflow, pytorch, mxnet, mpi, chainer, jax, xgboost, paddle, generic"
        );
        assert!(by_name("tensorflw").is_none());
    }

    #[test]
    fn hosts_are_job_role_index_under_the_job_service() {
        let t = Topology::parse("worker=2").unwrap();
        let mut job = JobView {
            port: 1234,
            ..test_support::job(&t)
        };
        assert_eq!(job.host("worker", 1), "j-worker-1.j.ns.svc");
        assert_eq!(job.host_port("worker", 0), "j-worker-0.j.ns.svc:1234");
        job.cluster_domain = "cluster.local";
        assert_eq!(job.host("worker", 1), "j-worker-1.j.ns.svc.cluster.local");
    }

    #[test]
    fn generic_vars_rank_in_role_order() {
        let t = Topology::parse("worker=2,master=1").unwrap();
        let f = by_name("pytorch").unwrap();
        let job = JobView {
            name: "j",
            namespace: "ns",
            cluster_domain: "",
            topology: &t,
            port: 1,
            slots: &crate::contract::Slots::uniform(1),
            elastic: None,
            backoff_limit: 3,
            compat: None,
            mpi: Default::default(),
        };
        let mut env = Env::new();
        generic_env(
            f,
            &job,
            &Member {
                role: "worker",
                index: 1,
                gpus: None,
                host_network: false,
            },
            &mut env,
        );
        let want: Env = [
            ("DLJOB_JOB", "j"),
            ("DLJOB_ROLE", "worker"),
            ("DLJOB_INDEX", "1"),
            ("DLJOB_RANK", "2"),
            ("DLJOB_WORLD_SIZE", "3"),
            ("DLJOB_REPLICAS", "master=1,worker=2"),
            ("DLJOB_HOST_PATTERN", "j-{role}-{index}.j.ns.svc"),
            ("DLJOB_COORDINATOR", "j-master-0.j.ns.svc"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(env, want);
    }

    #[test]
    fn host_pattern_names_every_host() {
        let t = Topology::parse("worker=2").unwrap();
        let mut job = test_support::job(&t);
        assert_eq!(job.host_pattern(), "j-{role}-{index}.j.ns.svc");
        job.cluster_domain = "cluster.local";
        assert_eq!(
            job.host_pattern()
                .replace("{role}", "worker")
                .replace("{index}", "1"),
            job.host("worker", 1)
        );
    }

    #[test]
    fn role_rules_name_the_fix() {
        let mx = by_name("mxnet").unwrap();
        let p = check_topology(
            mx,
            &Topology::parse("scheduler=2,server=1,worker=1").unwrap(),
        );
        assert_eq!(
            p,
            vec!["dljob.dev/replicas: 2 scheduler replicas declared, but a mxnet job has exactly 1 scheduler"]
        );
        let p = check_topology(mx, &Topology::parse("server=1,worker=1").unwrap());
        assert_eq!(
            p,
            vec!["dljob.dev/replicas: a mxnet job needs exactly 1 scheduler replica; add \"scheduler=1\""]
        );
        let p = check_topology(
            mx,
            &Topology::parse("scheduler=1,server=1,worker=1,ps=1").unwrap(),
        );
        assert_eq!(
            p,
            vec!["dljob.dev/replicas: role \"ps\" is not a mxnet role; mxnet roles are scheduler, server, worker"]
        );
        assert_eq!(
            check_role(mx, "ps").unwrap_err(),
            "dljob.dev/role: \"ps\" is not a mxnet role; use one of scheduler, server, worker"
        );
    }
}
