//! ChainerMN: runs on mpiexec like mpi, with the master listed last.

use super::mpi::mpi_env;
use super::{
    first_replica_of, push_hostfile_lines, push_own_hostfile_line, Env, Framework, JobView, Member,
    RoleRule, Roles,
};
use crate::contract::Topology;

pub(crate) struct Chainer;

const ROLES: &[RoleRule] = &[RoleRule::exactly_one("master"), RoleRule::any("worker")];

impl Framework for Chainer {
    fn name(&self) -> &'static str {
        "chainer"
    }
    fn roles(&self) -> Roles {
        Roles::Fixed(ROLES)
    }
    fn default_port(&self) -> u16 {
        22
    }
    fn coordinator<'t>(&self, topology: &'t Topology) -> Option<(&'t str, u32)> {
        first_replica_of(topology, &["master"])
    }
    fn env(&self, job: &JobView<'_>, member: &Member<'_>, env: &mut Env) {
        mpi_env(job, member, "master", true, env);
    }
    /// The master's (it runs mpiexec): the workers, then the master, as
    /// the chainer-operator listed them; the master by its own host name.
    fn hostfile(&self, job: &JobView<'_>, member: &Member<'_>) -> Option<String> {
        if member.role != "master" {
            return None;
        }
        let mut out = String::new();
        push_hostfile_lines(&mut out, job, "worker");
        push_own_hostfile_line(&mut out, job, member);
        Some(out)
    }
    fn uses_slots(&self) -> bool {
        true
    }
    fn ssh_client_role(&self) -> Option<&'static str> {
        Some("master")
    }
    fn gated_role(&self) -> Option<&'static str> {
        Some("master")
    }
}

#[cfg(test)]
mod tests {
    use crate::contract::Topology;
    use crate::frameworks::test_support::{env_of, get};
    use crate::frameworks::{by_name, JobView, Member};

    #[test]
    fn master_is_listed_last() {
        let t = Topology::parse("master=1,worker=2").unwrap();
        let job = JobView {
            name: "cmn",
            namespace: "ns",
            cluster_domain: "",
            topology: &t,
            port: 22,
            slots: &crate::contract::Slots::uniform(4),
            elastic: None,
            backoff_limit: 3,
            compat: None,
            mpi: Default::default(),
        };
        let hf = by_name("chainer").unwrap().hostfile(
            &job,
            &Member {
                role: "master",
                index: 0,
                gpus: Some(4),
                host_network: false,
            },
        );
        assert_eq!(
            hf.as_deref(),
            Some("cmn-worker-0.cmn.ns.svc slots=4\ncmn-worker-1.cmn.ns.svc slots=4\ncmn-master-0 slots=4\n")
        );
    }

    #[test]
    fn role_is_exposed_like_mpi() {
        let env = env_of("chainer", "master=1,worker=2", "master", 0, None);
        assert_eq!(get(&env, "K_MPI_JOB_ROLE"), Some("master"));
        assert_eq!(
            get(&env, "OMPI_MCA_orte_default_hostfile"),
            Some("/etc/dljob/hostfile")
        );
    }
}
