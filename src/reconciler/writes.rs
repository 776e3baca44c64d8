//! How dljob writes to the API server: its field manager, the answers a
//! write takes as done, and the status write.

use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::crd::{DLJob, DLJobStatus};

/// The field manager of every write.
pub(crate) const MANAGER: &str = "dljob";

/// Create parameters under dljob's field manager.
pub(super) fn create_params() -> PostParams {
    PostParams {
        field_manager: Some(MANAGER.to_owned()),
        ..PostParams::default()
    }
}

/// `result`, with the API errors of `codes` counted as success.
pub(super) fn tolerate(result: Result<(), kube::Error>, codes: &[u16]) -> Result<(), kube::Error> {
    match result {
        Err(kube::Error::Api(s)) if codes.contains(&s.code) => Ok(()),
        other => other,
    }
}

pub(super) const NOT_FOUND: u16 = 404;
pub(super) const CONFLICT: u16 = 409;

/// A write made only to the object with the uid it names (`metadata.uid`
/// in the body) found another object of that name: the API server answers
/// 422 (uid is immutable) for a patch, 409 for a create-by-apply or the
/// scale subresource. The object observed is gone: nothing to do.
pub(super) fn replaced(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s)
        if (s.code == 422 && s.message.contains("metadata.uid")) || s.code == CONFLICT)
}

/// `result` with "gone" (404) and "replaced" ([`replaced`]) as success.
pub(super) fn tolerate_gone_or_replaced(
    result: Result<(), kube::Error>,
) -> Result<(), kube::Error> {
    match result {
        Err(kube::Error::Api(s)) if s.code == NOT_FOUND => Ok(()),
        Err(e) if replaced(&e) => Ok(()),
        other => other,
    }
}

/// `metadata` for a merge patch: `uid` (a precondition: a replaced object
/// of the same name refuses the patch) beside `rest`. An object observed
/// without a uid (never one from the API server) is patched unguarded.
pub(super) fn guarded(uid: &str, rest: serde_json::Value) -> serde_json::Value {
    let mut meta = rest;
    if !uid.is_empty() {
        meta["uid"] = json!(uid);
    }
    meta
}

/// Writes a DLJob's status whole: server-side applied by dljob, its only
/// manager, so that what is applied is what the status becomes (a field
/// left out is removed) and what the API server checks is a whole status.
pub(super) async fn write_status(
    jobs: &Api<DLJob>,
    name: &str,
    status: &DLJobStatus,
) -> Result<(), kube::Error> {
    let body = json!({"apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob", "status": status});
    jobs.patch_status(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    Ok(())
}
