//! First sight of a job: the DLJob of every job that has a live member
//! and none yet.

use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};

use super::index::MemberIndex;
use super::listed::Unreadable;
use super::resources;
use super::writes::{create_params, tolerate, CONFLICT};
use crate::crd::DLJob;

/// Creates `object` unless it exists (AlreadyExists is success).
async fn create_if_absent<K>(api: Api<K>, object: &K) -> Result<(), kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    tolerate(
        api.create(&create_params(), object).await.map(drop),
        &[CONFLICT],
    )
}

/// Creates the DLJob of every job that has a live member and no DLJob yet
/// (first sight of a member). Returns how many it created. A walk of the
/// whole index: as leadership starts; afterwards [`create_for`] the jobs
/// that changed.
pub async fn create_missing(
    client: &Client,
    index: &MemberIndex,
    dljobs: &Store<DLJob>,
    unreadable: &Unreadable,
) -> Result<usize, kube::Error> {
    let mut created = 0;
    for ((namespace, name), entry) in index.live_jobs() {
        let job = ObjectRef::new(&name).within(&namespace);
        if dljobs.get(&job).is_some() || unreadable.contains(&job) {
            continue;
        }
        match create(client, &namespace, &entry).await? {
            Sight::Created => created += 1,
            Sight::Refused(message) => {
                tracing::warn!(job = %name, %namespace, error = %message, "the API server refused the job's DLJob");
            }
            Sight::Nothing => {}
        }
    }
    Ok(created)
}

/// What first sight did for one job.
#[derive(Debug, PartialEq, Eq)]
pub enum Sight {
    /// Its DLJob was made.
    Created,
    /// Nothing to make: it has one, or no live member.
    Nothing,
    /// The API server refused its DLJob (a spec its schema rejects), why.
    Refused(String),
}

/// The DLJob of each of `jobs` that has a live member and no DLJob yet:
/// what was done for each. O(the jobs given), and a job that has its
/// DLJob costs a store lookup, not a walk of its members. Stops at the
/// first error that is not a refusal (the API server unreachable): the
/// jobs not reached are the caller's to give again.
pub async fn create_for(
    client: &Client,
    index: &MemberIndex,
    dljobs: &Store<DLJob>,
    unreadable: &Unreadable,
    jobs: &[(String, String)],
) -> Result<Vec<Sight>, kube::Error> {
    let mut out = Vec::with_capacity(jobs.len());
    for (namespace, name) in jobs {
        let job = ObjectRef::new(name).within(namespace);
        if dljobs.get(&job).is_some() || unreadable.contains(&job) {
            out.push(Sight::Nothing);
            continue;
        }
        let Some(entry) = index.live_member(namespace, name) else {
            out.push(Sight::Nothing);
            continue;
        };
        out.push(create(client, namespace, &entry).await?);
    }
    Ok(out)
}

/// Creates the DLJob `entry`'s job would have.
async fn create(
    client: &Client,
    namespace: &str,
    entry: &super::index::Entry,
) -> Result<Sight, kube::Error> {
    let job = resources::dljob_for(&entry.member, entry.tensorboard_volume.as_ref());
    match create_if_absent(Api::<DLJob>::namespaced(client.clone(), namespace), &job).await {
        Ok(()) => Ok(Sight::Created),
        // One job the API server refuses (a spec its schema rejects)
        // must not keep the others from getting theirs.
        Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 => Ok(Sight::Refused(s.message)),
        Err(e) => Err(e),
    }
}
