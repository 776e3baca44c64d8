//! PyTorch DDP and torchrun (`PET_*`), including elastic rendezvous.

use super::{first_replica_of, rank, set, Env, Framework, JobView, Member, RoleRule, Roles};
use crate::contract::{Topology, COMPAT_KUBEFLOW};

pub(crate) struct PyTorch;

const ROLES: &[RoleRule] = &[RoleRule::at_most_one("master"), RoleRule::any("worker")];

impl Framework for PyTorch {
    fn name(&self) -> &'static str {
        "pytorch"
    }
    fn roles(&self) -> Roles {
        Roles::Fixed(ROLES)
    }
    fn default_port(&self) -> u16 {
        23456
    }
    fn coordinator<'t>(&self, topology: &'t Topology) -> Option<(&'t str, u32)> {
        first_replica_of(topology, &["master", "worker"])
    }
    /// The workers resize; the master, where there is one, stays.
    fn elastic_role(&self) -> Option<&'static str> {
        Some("worker")
    }
    /// The training-operator's PyTorchJob reads dljob's names; it also
    /// unbuffers Python's output.
    fn compat_env(&self, job: &JobView<'_>, _member: &Member<'_>, env: &mut Env) {
        if job.compat != Some(COMPAT_KUBEFLOW) {
            return;
        }
        set(env, "PYTHONUNBUFFERED", "1");
    }
    fn env(&self, job: &JobView<'_>, member: &Member<'_>, env: &mut Env) {
        let Some((coord_role, coord_index)) = self.coordinator(job.topology) else {
            return;
        };
        let master = job.host(coord_role, coord_index);
        let port = job.port.to_string();
        let world = job.topology.total().to_string();
        set(env, "MASTER_ADDR", master.clone());
        set(env, "MASTER_PORT", port.clone());
        set(env, "PET_MASTER_ADDR", master.clone());
        set(env, "PET_MASTER_PORT", port.clone());
        let nproc = member
            .gpus
            .filter(|g| *g > 0)
            .map_or_else(|| "auto".to_owned(), |g| g.to_string());
        set(env, "PET_NPROC_PER_NODE", nproc);
        match job.elastic {
            None => {
                let r = rank(self, job.topology, member.role, member.index).to_string();
                set(env, "WORLD_SIZE", world.clone());
                set(env, "RANK", r.clone());
                set(env, "PET_NNODES", world);
                set(env, "PET_NODE_RANK", r);
            }
            Some(elastic) => {
                // torchrun assigns ranks at rendezvous; a fixed RANK would fight it.
                set(env, "PET_NNODES", elastic.to_string());
                set(env, "PET_RDZV_BACKEND", "c10d");
                set(env, "PET_RDZV_ENDPOINT", format!("{master}:{port}"));
                set(env, "PET_RDZV_ID", job.name);
                // A worker process that fails is restarted in place by
                // torchrun (not by dljob, which sees no exit): as many
                // times as the job allows retries (torchrun's default, 0,
                // fails the node at once).
                set(env, "PET_MAX_RESTARTS", job.backoff_limit.to_string());
                // torch (2.4 and later) keeps the first round's TCP store
                // across rounds by default, and a round after an in-place
                // restart then fails ("Gloo connectFullMesh … Connection
                // refused", pytorch issue 135712): each round gets its own.
                set(env, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1");
                // torch decides who hosts the c10d store by comparing the
                // endpoint with the machine's hostname and canonical FQDN;
                // `j-worker-0.j.ns.svc` is neither (`j-worker-0`,
                // `….svc.cluster.local`), so nobody would host. Say it.
                let hosts = member.role == coord_role && member.index == coord_index;
                set(
                    env,
                    "PET_RDZV_CONF",
                    if hosts {
                        "is_host=true"
                    } else {
                        "is_host=false"
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::contract::Elastic;
    use crate::frameworks::test_support::{env_of, env_with, get};

    #[test]
    fn worker_rank_counts_master_first() {
        let env = env_of("pytorch", "master=1,worker=3", "worker", 2, Some(4));
        assert_eq!(get(&env, "MASTER_ADDR"), Some("j-master-0.j.ns.svc"));
        assert_eq!(get(&env, "MASTER_PORT"), Some("23456"));
        assert_eq!(get(&env, "WORLD_SIZE"), Some("4"));
        assert_eq!(get(&env, "RANK"), Some("3"));
        assert_eq!(get(&env, "PET_MASTER_ADDR"), Some("j-master-0.j.ns.svc"));
        assert_eq!(get(&env, "PET_MASTER_PORT"), Some("23456"));
        assert_eq!(get(&env, "PET_NNODES"), Some("4"));
        assert_eq!(get(&env, "PET_NODE_RANK"), Some("3"));
        assert_eq!(get(&env, "PET_NPROC_PER_NODE"), Some("4"));
    }

    #[test]
    fn master_is_rank_zero_and_nproc_is_auto_without_gpus() {
        let env = env_of("pytorch", "worker=2,master=1", "master", 0, None);
        assert_eq!(get(&env, "RANK"), Some("0"));
        assert_eq!(get(&env, "WORLD_SIZE"), Some("3"));
        assert_eq!(get(&env, "PET_NPROC_PER_NODE"), Some("auto"));
    }

    #[test]
    fn workers_only_job_uses_worker_zero_as_master() {
        let env = env_of("pytorch", "worker=2", "worker", 1, None);
        assert_eq!(get(&env, "MASTER_ADDR"), Some("j-worker-0.j.ns.svc"));
        assert_eq!(get(&env, "RANK"), Some("1"));
        assert_eq!(get(&env, "WORLD_SIZE"), Some("2"));
    }

    #[test]
    fn elastic_uses_rendezvous_and_no_fixed_rank() {
        let env = env_with(
            "pytorch",
            "worker=3",
            "worker",
            1,
            None,
            Some(Elastic { min: 2, max: 4 }),
        );
        assert_eq!(get(&env, "PET_NNODES"), Some("2:4"));
        assert_eq!(get(&env, "PET_RDZV_BACKEND"), Some("c10d"));
        assert_eq!(
            get(&env, "PET_RDZV_ENDPOINT"),
            Some("j-worker-0.j.ns.svc:23456")
        );
        assert_eq!(get(&env, "PET_RDZV_ID"), Some("j"));
        assert_eq!(get(&env, "PET_RDZV_CONF"), Some("is_host=false"));
        assert_eq!(get(&env, "PET_MAX_RESTARTS"), Some("3"));
        assert_eq!(get(&env, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"), Some("1"));
        assert_eq!(get(&env, "RANK"), None);
        assert_eq!(get(&env, "PET_NODE_RANK"), None);
    }

    #[test]
    fn elastic_rendezvous_is_hosted_by_the_coordinator_only() {
        let elastic = Some(Elastic { min: 1, max: 3 });
        let conf = |topology, role, index| {
            let env = env_with("pytorch", topology, role, index, None, elastic);
            get(&env, "PET_RDZV_CONF").map(str::to_owned)
        };
        assert_eq!(
            conf("worker=3", "worker", 0).as_deref(),
            Some("is_host=true")
        );
        assert_eq!(
            conf("master=1,worker=2", "master", 0).as_deref(),
            Some("is_host=true")
        );
        assert_eq!(
            conf("master=1,worker=2", "worker", 0).as_deref(),
            Some("is_host=false")
        );
    }
}
