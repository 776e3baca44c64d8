//! MPI (Horovod, mpirun): a hostfile of the workers for the launcher, laid
//! out as the MPI operator does, and the OpenMPI settings pointing at it.

use super::{
    first_replica_of, push_hostfile_lines, push_own_hostfile_line, set, Env, Framework, JobView,
    Member, RoleRule, Roles,
};
use crate::contract::{MpiImplementation, Topology, COMPAT_MPI_OPERATOR, HOSTFILE_PATH};

pub(crate) struct Mpi;

const ROLES: &[RoleRule] = &[
    RoleRule::exactly_one("launcher"),
    RoleRule::at_least_one("worker"),
];

impl Framework for Mpi {
    fn name(&self) -> &'static str {
        "mpi"
    }
    fn roles(&self) -> Roles {
        Roles::Fixed(ROLES)
    }
    fn default_port(&self) -> u16 {
        22
    }
    fn coordinator<'t>(&self, topology: &'t Topology) -> Option<(&'t str, u32)> {
        first_replica_of(topology, &["launcher"])
    }
    fn env(&self, job: &JobView<'_>, member: &Member<'_>, env: &mut Env) {
        mpi_env(job, member, "launcher", lists_launcher(member), env);
    }
    /// The launcher's: workers, `slots` each; the launcher first, by its
    /// own host name, when it requests GPUs itself (only the launcher can
    /// know that, and only it runs mpirun). Workers run sshd and read no
    /// hostfile.
    fn hostfile(&self, job: &JobView<'_>, member: &Member<'_>) -> Option<String> {
        if member.role != "launcher" {
            return None;
        }
        let mut out = String::new();
        if lists_launcher(member) {
            push_own_hostfile_line(&mut out, job, member);
        }
        push_hostfile_lines(&mut out, job, "worker");
        Some(out)
    }
    /// The MPI operator's launcher that runs no ranks hides the node's
    /// GPUs from its container (the operator's images may rely on it).
    fn compat_env(&self, job: &JobView<'_>, member: &Member<'_>, env: &mut Env) {
        if job.compat == Some(COMPAT_MPI_OPERATOR)
            && member.role == "launcher"
            && !lists_launcher(member)
        {
            set(env, "NVIDIA_VISIBLE_DEVICES", "");
            set(env, "NVIDIA_DRIVER_CAPABILITIES", "");
        }
    }
    fn uses_slots(&self) -> bool {
        true
    }
    fn volcano_mpi_host_role(&self) -> Option<&'static str> {
        self.ssh_client_role()
    }
    fn ssh_client_role(&self) -> Option<&'static str> {
        Some("launcher")
    }
    fn gated_role(&self) -> Option<&'static str> {
        Some("launcher")
    }
}

/// The MPI settings shared by mpi and chainer: every member learns its
/// role; the member that runs mpirun (`launcher_role`) learns how many
/// ranks fill the hostfile, and the implementation's own names for the
/// hostfile and the ssh arguments ([`openmpi_env`], [`hydra_env`]).
pub(super) fn mpi_env(
    job: &JobView<'_>,
    member: &Member<'_>,
    launcher_role: &str,
    launcher_listed: bool,
    env: &mut Env,
) {
    set(env, "K_MPI_JOB_ROLE", member.role);
    if member.role != launcher_role {
        return;
    }
    // Every slot of the hostfile: what `mpirun -np` takes to fill it.
    let workers: u32 = (0..job.topology.count_or_zero("worker"))
        .map(|i| job.slots_of("worker", i))
        .fold(0, u32::saturating_add);
    let launcher = if launcher_listed {
        job.slots_of(launcher_role, 0)
    } else {
        0
    };
    set(
        env,
        "DLJOB_MPI_NP",
        workers.saturating_add(launcher).to_string(),
    );
    match job.mpi {
        MpiImplementation::OpenMpi => openmpi_env(job, env),
        hydra => hydra_env(hydra, job, member, env),
    }
}

/// OpenMPI 4's names (ORTE) and OpenMPI 5's (PRRTE), so one image works
/// with either: each ignores the other's, silently. Checked with both
/// (conformance/test_mpi.py):
/// - OpenMPI 4 must keep FQDNs (it would ssh to the bare hostname, which the
///   cluster's DNS does not resolve); PRRTE must not (it compares names
///   without resolving them, so the launcher's own FQDN would look remote
///   and it would ssh to itself), said explicitly so that PRRTE's mapping of
///   `orte_*` names can never carry OpenMPI 4's `true` over;
/// - tree spawn (past 64 hosts, daemons ssh on to the rest) is off in
///   both: only the launcher holds the job's private key (workers mount
///   only `authorized_keys`), and PRRTE's passes on short hostnames and
///   truncates the ssh arguments besides; mpirun reaches every host
///   itself;
/// - slots come from the hostfile's `slots=N`; `orte_set_default_slots`
///   only covers a host given without it.
fn openmpi_env(job: &JobView<'_>, env: &mut Env) {
    let slots = job.slots.default_count().to_string();
    set(env, "OMPI_MCA_orte_default_hostfile", HOSTFILE_PATH);
    set(env, "OMPI_MCA_orte_keep_fqdn_hostnames", "true");
    set(env, "OMPI_MCA_orte_set_default_slots", slots);
    set(env, "OMPI_MCA_plm_rsh_args", SSH_ARGS);
    set(env, "OMPI_MCA_plm_rsh_no_tree_spawn", "true");
    set(env, "PRTE_MCA_prte_default_hostfile", HOSTFILE_PATH);
    set(env, "PRTE_MCA_prte_keep_fqdn_hostnames", "false");
    set(env, "PRTE_MCA_plm_ssh_args", SSH_ARGS);
    set(env, "PRTE_MCA_plm_ssh_no_tree_spawn", "true");
}

/// Hydra, the `mpiexec` of MPICH and of Intel MPI, under each one's names:
/// the hostfile (`host:N` lines), the ssh launcher and its arguments, and
/// the interface whose address the workers' proxies connect back to.
/// Checked with both (conformance/test_hydra.py):
/// - Hydra's proxies, started on the workers over ssh, connect back to
///   mpiexec at the launcher's host name, which the cluster's DNS does
///   not resolve (only `<host>.<job>…` names are published). Named by the
///   pod's interface (`eth0`, the name every container runtime gives a
///   pod's network), they get its address. A pod on its node's network
///   has the node's interfaces and host name: nothing is set there.
/// - MPICH reads `HYDRA_LAUNCHER_EXTRA_ARGS`; the MPI operator sets
///   `HYDRA_LAUNCH_EXTRA_ARGS`, which MPICH does not read.
fn hydra_env(
    implementation: MpiImplementation,
    job: &JobView<'_>,
    member: &Member<'_>,
    env: &mut Env,
) {
    let [hostfile, launcher, extra_args, iface] = match implementation {
        MpiImplementation::Intel => [
            "I_MPI_HYDRA_HOST_FILE",
            "I_MPI_HYDRA_BOOTSTRAP",
            "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
            "I_MPI_HYDRA_IFACE",
        ],
        _ => [
            "HYDRA_HOST_FILE",
            "HYDRA_LAUNCHER",
            "HYDRA_LAUNCHER_EXTRA_ARGS",
            "HYDRA_IFACE",
        ],
    };
    set(env, hostfile, HOSTFILE_PATH);
    set(env, launcher, "ssh");
    set(env, extra_args, SSH_ARGS);
    // Intel's mpiexec takes the hosts of that file but not their counts:
    // it places I_MPI_PERHOST ranks on each (by default, as many as the
    // host has cores), so it is given the one count there is. Different
    // counts per host need `-machinefile` (admission says so).
    if implementation == MpiImplementation::Intel && job.slots.is_uniform() {
        set(env, "I_MPI_PERHOST", job.slots.default_count().to_string());
    }
    if !member.host_network {
        set(env, iface, POD_INTERFACE);
    }
}

/// The network interface a container runtime gives a pod (CRI's default
/// network is always attached as `eth0`).
const POD_INTERFACE: &str = "eth0";

/// The launcher runs ranks too (is in its hostfile) when it requests GPUs.
fn lists_launcher(member: &Member<'_>) -> bool {
    member.gpus.unwrap_or(0) > 0
}

/// Retries while the workers' sshd starts.
const SSH_ARGS: &str = "-o ConnectionAttempts=10";

#[cfg(test)]
mod tests {
    use crate::contract::{MpiImplementation, Topology};
    use crate::frameworks::test_support::{env_of, get};
    use crate::frameworks::{by_name, JobView, Member};

    fn hostfile(role: &str, gpus: Option<u32>, slots: u32) -> Option<String> {
        hostfile_on(role, gpus, slots, false)
    }

    fn hostfile_on(
        role: &str,
        gpus: Option<u32>,
        slots: u32,
        host_network: bool,
    ) -> Option<String> {
        let t = Topology::parse("launcher=1,worker=3").unwrap();
        let job = JobView {
            name: "hvd",
            namespace: "ml",
            cluster_domain: "",
            topology: &t,
            port: 22,
            slots: &crate::contract::Slots::uniform(slots),
            elastic: None,
            backoff_limit: 3,
            compat: None,
            mpi: Default::default(),
        };
        by_name("mpi").unwrap().hostfile(
            &job,
            &Member {
                role,
                index: 0,
                gpus,
                host_network,
            },
        )
    }

    #[test]
    fn launcher_hostfile_lists_workers_with_slots() {
        assert_eq!(
            hostfile("launcher", None, 2).as_deref(),
            Some("hvd-worker-0.hvd.ml.svc slots=2\nhvd-worker-1.hvd.ml.svc slots=2\nhvd-worker-2.hvd.ml.svc slots=2\n")
        );
    }

    #[test]
    fn workers_get_no_hostfile() {
        assert_eq!(hostfile("worker", Some(2), 2), None);
    }

    #[test]
    fn gpu_launcher_lists_itself_first() {
        assert_eq!(
            hostfile("launcher", Some(1), 1).as_deref(),
            Some("hvd-launcher-0 slots=1\nhvd-worker-0.hvd.ml.svc slots=1\nhvd-worker-1.hvd.ml.svc slots=1\nhvd-worker-2.hvd.ml.svc slots=1\n")
        );
        // On its node's network its host name is the node's: listed by the
        // Service's name, which resolves to the node's own address.
        assert!(hostfile_on("launcher", Some(1), 1, true)
            .unwrap()
            .starts_with("hvd-launcher-0.hvd.ml.svc slots=1\n"));
    }

    /// Two worker sets, 8 and 4 GPUs: each host its set's slots, the
    /// launcher (with GPUs of its own) the count for other hosts, and
    /// DLJOB_MPI_NP every slot of the hostfile.
    #[test]
    fn heterogeneous_sets_get_their_own_slots() {
        let (hostfile, env) = launcher_of(
            "launcher=1,worker=5",
            "2,0-1=8,2-4=4",
            MpiImplementation::OpenMpi,
            Some(2),
            false,
        );
        assert_eq!(
            hostfile,
            "pi-launcher-0 slots=2\n\
             pi-worker-0.pi.ml.svc slots=8\n\
             pi-worker-1.pi.ml.svc slots=8\n\
             pi-worker-2.pi.ml.svc slots=4\n\
             pi-worker-3.pi.ml.svc slots=4\n\
             pi-worker-4.pi.ml.svc slots=4\n"
        );
        assert_eq!(get(&env, "DLJOB_MPI_NP"), Some("30"));
    }

    #[test]
    fn launcher_gets_openmpi_4_and_5_settings() {
        let env = env_of("mpi", "launcher=1,worker=2", "launcher", 0, None);
        let want = [
            ("K_MPI_JOB_ROLE", "launcher"),
            // 2 workers × 1 slot: `mpirun -np $DLJOB_MPI_NP`.
            ("DLJOB_MPI_NP", "2"),
            ("OMPI_MCA_orte_default_hostfile", "/etc/dljob/hostfile"),
            ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
            ("OMPI_MCA_orte_set_default_slots", "1"),
            ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
            ("OMPI_MCA_plm_rsh_no_tree_spawn", "true"),
            ("PRTE_MCA_prte_default_hostfile", "/etc/dljob/hostfile"),
            ("PRTE_MCA_prte_keep_fqdn_hostnames", "false"),
            ("PRTE_MCA_plm_ssh_args", "-o ConnectionAttempts=10"),
            ("PRTE_MCA_plm_ssh_no_tree_spawn", "true"),
        ];
        assert_eq!(
            env,
            want.map(|(n, v)| (n.to_owned(), v.to_owned())).to_vec()
        );
    }

    /// The hostfile and env of the launcher of job `pi` in namespace `ml`.
    fn launcher_of(
        topology: &str,
        slots: &str,
        mpi: MpiImplementation,
        gpus: Option<u32>,
        host_network: bool,
    ) -> (String, Vec<(String, String)>) {
        let t = Topology::parse(topology).unwrap();
        let slots = crate::contract::Slots::parse(slots).unwrap();
        let job = JobView {
            name: "pi",
            namespace: "ml",
            cluster_domain: "",
            topology: &t,
            port: 22,
            slots: &slots,
            elastic: None,
            backoff_limit: 3,
            compat: None,
            mpi,
        };
        let launcher = Member {
            role: "launcher",
            index: 0,
            gpus,
            host_network,
        };
        let f = by_name("mpi").unwrap();
        let mut env = Vec::new();
        f.env(&job, &launcher, &mut env);
        (f.hostfile(&job, &launcher).unwrap(), env)
    }

    /// The launcher of `launcher=1,worker=2` under `mpi`, with `slots`.
    fn hydra_launcher(
        mpi: MpiImplementation,
        slots: &str,
        gpus: Option<u32>,
        host_network: bool,
    ) -> (String, Vec<(String, String)>) {
        launcher_of("launcher=1,worker=2", slots, mpi, gpus, host_network)
    }

    fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn mpich_gets_hydras_hostfile_and_names() {
        let (hostfile, env) = hydra_launcher(MpiImplementation::Mpich, "2", None, false);
        assert_eq!(
            hostfile,
            "pi-worker-0.pi.ml.svc:2\npi-worker-1.pi.ml.svc:2\n"
        );
        assert_eq!(
            env,
            owned(&[
                ("K_MPI_JOB_ROLE", "launcher"),
                ("DLJOB_MPI_NP", "4"),
                ("HYDRA_HOST_FILE", "/etc/dljob/hostfile"),
                ("HYDRA_LAUNCHER", "ssh"),
                ("HYDRA_LAUNCHER_EXTRA_ARGS", "-o ConnectionAttempts=10"),
                ("HYDRA_IFACE", "eth0"),
            ])
        );
    }

    #[test]
    fn intel_gets_its_names_and_the_ranks_per_host() {
        let (hostfile, env) = hydra_launcher(MpiImplementation::Intel, "1", Some(1), false);
        // A GPU launcher first, by its own host name, in Hydra's form.
        assert_eq!(
            hostfile,
            "pi-launcher-0:1\npi-worker-0.pi.ml.svc:1\npi-worker-1.pi.ml.svc:1\n"
        );
        assert_eq!(
            env,
            owned(&[
                ("K_MPI_JOB_ROLE", "launcher"),
                ("DLJOB_MPI_NP", "3"),
                ("I_MPI_HYDRA_HOST_FILE", "/etc/dljob/hostfile"),
                ("I_MPI_HYDRA_BOOTSTRAP", "ssh"),
                (
                    "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
                    "-o ConnectionAttempts=10"
                ),
                ("I_MPI_PERHOST", "1"),
                ("I_MPI_HYDRA_IFACE", "eth0"),
            ])
        );
    }

    #[test]
    fn intel_with_counts_per_host_gets_no_single_count() {
        let (hostfile, env) = hydra_launcher(MpiImplementation::Intel, "1,0=4", None, false);
        assert_eq!(
            hostfile,
            "pi-worker-0.pi.ml.svc:4\npi-worker-1.pi.ml.svc:1\n"
        );
        assert_eq!(get(&env, "I_MPI_PERHOST"), None);
        assert_eq!(get(&env, "DLJOB_MPI_NP"), Some("5"));
    }

    #[test]
    fn hydra_on_the_nodes_network_names_no_interface() {
        for mpi in [MpiImplementation::Intel, MpiImplementation::Mpich] {
            let (hostfile, env) = hydra_launcher(mpi, "1", Some(1), true);
            assert!(
                hostfile.starts_with("pi-launcher-0.pi.ml.svc:1\n"),
                "{hostfile}"
            );
            assert!(env.iter().all(|(n, _)| !n.ends_with("IFACE")), "{env:?}");
        }
    }

    #[test]
    fn workers_get_only_their_role() {
        let env = env_of("mpi", "launcher=1,worker=2", "worker", 1, None);
        assert_eq!(
            env,
            vec![("K_MPI_JOB_ROLE".to_owned(), "worker".to_owned())]
        );
        assert_eq!(get(&env, "OMPI_MCA_orte_default_hostfile"), None);
    }
}
