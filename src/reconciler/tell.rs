//! Telling each DLJob that does not parse why, on itself.

use std::time::Duration;

use super::events::Recorder;
use super::listed::Unreadable;
use super::status;
use crate::telemetry::Chain;

/// How long a DLJob whose Event could not be published waits before it
/// is tried again (sooner when another DLJob is to be told).
const RETELL: Duration = Duration::from_secs(30);

/// The Warning Event on a DLJob that does not parse: what dljob does about
/// it and the way out, then why (a reason cut by the recorder cuts only
/// the reason).
pub fn unreadable_event(why: &str) -> status::JobEvent {
    status::JobEvent {
        warning: true,
        reason: "Unreadable".to_owned(),
        note: format!(
            "this DLJob does not parse, so dljob sets it aside and goes on with the other jobs: put it right with kubectl edit, or delete it and dljob makes it again from the job's members. Why: {why}"
        ),
    }
}

/// Tells each DLJob that does not parse why, on itself (`kubectl describe
/// dljob` shows it), as `listed::readable` sets them aside: one Warning
/// Event per DLJob and reason. Returns how many could not be published
/// (they stay to be told).
pub async fn tell_untold(recorder: &Recorder, unreadable: &Unreadable) -> usize {
    let mut failed = 0;
    for (job, why) in unreadable.untold() {
        match recorder.publish(&job, &unreadable_event(&why)).await {
            Ok(()) => unreadable.told(&job, &why),
            Err(e) => {
                failed += 1;
                tracing::warn!(
                    job = job.name.as_deref().unwrap_or(""),
                    namespace = job.namespace.as_deref().unwrap_or(""),
                    error = %Chain(&e),
                    "publishing an Event failed; tried again later"
                );
            }
        }
    }
    failed
}

/// [`tell_untold`] whenever there is news, and again after [`RETELL`]
/// while an Event could not be published. Runs until dropped.
pub async fn tell_unreadable(recorder: &Recorder, unreadable: &Unreadable) {
    loop {
        if tell_untold(recorder, unreadable).await == 0 {
            unreadable.news().await;
        } else {
            let _ = tokio::time::timeout(RETELL, unreadable.news()).await;
        }
    }
}
