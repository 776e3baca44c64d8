//! MPI (Horovod, mpirun): a hostfile of the workers and OpenMPI settings,
//! laid out as the MPI operator does.

use super::{push_hostfile_lines, set, Env, Framework, Job, Member, RoleRule, Roles};
use crate::contract::Topology;
use crate::mutate::HOSTFILE_PATH;

pub struct Mpi;

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
        topology
            .roles()
            .find(|(r, _)| *r == "launcher")
            .map(|(r, _)| (r, 0))
    }
    fn env(&self, job: &Job<'_>, member: &Member<'_>, env: &mut Env) {
        mpi_env(job, member, env);
    }
    /// Workers, `slots` each; the launcher first when it requests GPUs
    /// itself (only the launcher can know that, and only it runs mpirun).
    fn hostfile(&self, job: &Job<'_>, member: &Member<'_>) -> String {
        let mut out = String::new();
        if member.role == "launcher" && member.gpus.unwrap_or(0) > 0 {
            push_hostfile_lines(&mut out, job, "launcher", job.slots);
        }
        push_hostfile_lines(&mut out, job, "worker", job.slots);
        out
    }
    fn uses_slots(&self) -> bool {
        true
    }
}

/// OpenMPI settings shared by mpi and chainer.
pub(super) fn mpi_env(job: &Job<'_>, member: &Member<'_>, env: &mut Env) {
    set(env, "OMPI_MCA_orte_default_hostfile", HOSTFILE_PATH);
    set(env, "OMPI_MCA_orte_keep_fqdn_hostnames", "true");
    set(
        env,
        "OMPI_MCA_orte_set_default_slots",
        job.slots.to_string(),
    );
    set(env, "OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10");
    set(env, "K_MPI_JOB_ROLE", member.role);
}

#[cfg(test)]
mod tests {
    use crate::contract::Topology;
    use crate::frameworks::test_support::{env_of, get};
    use crate::frameworks::{by_name, Job, Member};

    fn hostfile(role: &str, gpus: Option<u32>, slots: u32) -> String {
        let t = Topology::parse("launcher=1,worker=3").unwrap();
        let job = Job {
            name: "hvd",
            namespace: "ml",
            cluster_domain: "",
            topology: &t,
            port: 22,
            slots,
            elastic: None,
        };
        by_name("mpi").unwrap().hostfile(
            &job,
            &Member {
                role,
                index: 0,
                gpus,
            },
        )
    }

    #[test]
    fn hostfile_lists_workers_with_slots() {
        assert_eq!(
            hostfile("worker", Some(2), 2),
            "hvd-worker-0.hvd.ml.svc slots=2\nhvd-worker-1.hvd.ml.svc slots=2\nhvd-worker-2.hvd.ml.svc slots=2\n"
        );
    }

    #[test]
    fn gpu_launcher_lists_itself_first() {
        assert_eq!(
            hostfile("launcher", Some(1), 1),
            "hvd-launcher-0.hvd.ml.svc slots=1\nhvd-worker-0.hvd.ml.svc slots=1\nhvd-worker-1.hvd.ml.svc slots=1\nhvd-worker-2.hvd.ml.svc slots=1\n"
        );
        assert!(!hostfile("launcher", None, 1).contains("launcher"));
    }

    #[test]
    fn openmpi_settings() {
        let env = env_of("mpi", "launcher=1,worker=2", "launcher", 0, None);
        assert_eq!(
            get(&env, "OMPI_MCA_orte_default_hostfile"),
            Some("/etc/dljob/hostfile")
        );
        assert_eq!(get(&env, "OMPI_MCA_orte_keep_fqdn_hostnames"), Some("true"));
        assert_eq!(get(&env, "OMPI_MCA_orte_set_default_slots"), Some("1"));
        assert_eq!(
            get(&env, "OMPI_MCA_plm_rsh_args"),
            Some("-o ConnectionAttempts=10")
        );
        assert_eq!(get(&env, "K_MPI_JOB_ROLE"), Some("launcher"));
    }
}
