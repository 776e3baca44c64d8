//! Leader election on the Lease `dljob-reconciler`: the holder runs the
//! controller and the first-sight creator; losing the Lease stops them,
//! shutting down gives it up, and an election that ends on its own is said
//! and started again. The webhook is never affected.

use std::sync::Arc;
use std::time::Duration;

use futures::future;
use kube::Client;
use tokio::sync::watch;

use super::context::Stores;
use super::index::MemberIndex;
use super::metrics::Metrics;
use super::scope::Scope;
use super::{identity, run_controller, LEASE_NAME};
use crate::config::Config;
use crate::telemetry::Chain;

/// Leader election: while this replica holds the Lease, run the
/// controller and the first-sight creator; when it loses it, stop them and
/// wait to win it again. The webhook is never affected. When `shutdown`
/// turns true, the controller stops and the Lease is given up (returns
/// once the API server took that, or could not). If the election's own
/// task ends (it should not), that is said and the election starts again:
/// a replica whose reconciler stopped in silence would keep the webhook
/// ready while no job is reconciled.
pub(super) async fn lead(
    client: Client,
    index: Arc<MemberIndex>,
    stores: Stores,
    metrics: Arc<Metrics>,
    config: watch::Receiver<Config>,
    scope: Scope,
    shutdown: watch::Receiver<bool>,
) {
    let stopping = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    // Not before the caches have listed: a reconcile would see jobs
    // without their pods (and write every status away and back) and
    // Services missing (and apply every one again).
    tokio::select! {
        _ = future::join(index.wait_listed(), stores.services.wait_until_ready()) => {}
        () = stopping(shutdown.clone()) => return,
    }
    let namespace =
        std::env::var("POD_NAMESPACE").unwrap_or_else(|_| client.default_namespace().to_owned());
    loop {
        let manager = loop {
            match kube_lease_manager::LeaseManagerBuilder::new(client.clone(), LEASE_NAME)
                .with_namespace(&namespace)
                .with_identity(identity())
                .with_duration(15)
                .with_grace(5)
                .build()
                .await
            {
                Ok(m) => break m,
                Err(e) => {
                    tracing::warn!(error = %Chain(&e), "leader election: cannot use the Lease, retrying");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(10)) => {}
                        () = stopping(shutdown.clone()) => return,
                    }
                }
            }
        };
        let (leader, lease_task) = manager.watch().await;
        let stopped = elect(leader, &shutdown, |stop| {
            run_controller(&client, &index, &stores, &metrics, &config, &scope, stop)
        })
        .await;
        if stopped {
            // Every receiver of the leader state is gone: the lease task
            // gives the Lease up and ends.
            match lease_task.await {
                Ok(Ok(_)) => tracing::info!("leader Lease given up"),
                Ok(Err(e)) => {
                    tracing::warn!(error = %Chain(&e), "the leader Lease could not be given up: another replica takes over when it expires")
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the leader election task failed while giving the Lease up")
                }
            }
            return;
        }
        let why = match lease_task.await {
            Ok(Ok(_)) => "it ended".to_owned(),
            Ok(Err(e)) => Chain(&e).to_string(),
            Err(e) => e.to_string(),
        };
        tracing::error!(reason = %why, "leader election stopped: starting it again");
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = stopping(shutdown.clone()) => return,
        }
    }
}

/// While `leader` says this replica leads, runs `reconcile` until it stops
/// leading or `shutdown` turns true. Returns true on shutdown, false when
/// the election's task ended; `leader` is dropped either way.
async fn elect<F, Fut>(
    mut leader: watch::Receiver<bool>,
    shutdown: &watch::Receiver<bool>,
    mut reconcile: F,
) -> bool
where
    F: FnMut(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + Sync>>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    loop {
        let mut sd = shutdown.clone();
        tokio::select! {
            won = leader.wait_for(|l| *l) => {
                if won.is_err() {
                    return false; // the lease task ended
                }
            }
            _ = sd.wait_for(|s| *s) => return true,
        }
        tracing::info!("leader: reconciling");
        let mut lost = leader.clone();
        let mut sd = shutdown.clone();
        let stop = Box::pin(async move {
            tokio::select! {
                _ = lost.wait_for(|l| !*l) => {}
                _ = sd.wait_for(|s| *s) => {}
            }
        });
        reconcile(stop).await;
        if *shutdown.borrow() {
            tracing::info!("shutting down: reconciling stopped");
            return true;
        }
        tracing::info!("not the leader any more: reconciling stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// `elect` runs the controller while this replica leads, stops it when
    /// the lead is lost, runs it again when won again, returns false (the
    /// caller says so and elects again) when the election's task is gone,
    /// and true on shutdown, stopping a controller that runs.
    #[tokio::test]
    async fn the_controller_runs_while_leading_and_an_ended_election_is_told_apart() {
        let runs = Arc::new(AtomicU32::new(0));
        let reconcile = |runs: Arc<AtomicU32>| {
            move |stop: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + Sync>>| {
                runs.fetch_add(1, Ordering::SeqCst);
                stop
            }
        };
        // Won, lost, won again, then the election's task ends.
        let (leader_tx, leader) = watch::channel(false);
        let (_shutdown_tx, shutdown) = watch::channel(false);
        let elected = tokio::spawn({
            let runs = runs.clone();
            async move { elect(leader, &shutdown, reconcile(runs)).await }
        });
        let settle = || tokio::time::sleep(Duration::from_millis(20));
        settle().await;
        assert_eq!(runs.load(Ordering::SeqCst), 0, "not leading: nothing runs");
        leader_tx.send(true).unwrap();
        settle().await;
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        leader_tx.send(false).unwrap();
        settle().await;
        leader_tx.send(true).unwrap();
        settle().await;
        assert_eq!(runs.load(Ordering::SeqCst), 2, "led again: runs again");
        leader_tx.send(false).unwrap();
        settle().await;
        drop(leader_tx);
        let ended = tokio::time::timeout(Duration::from_secs(5), elected)
            .await
            .expect("elect returns once the election is gone")
            .unwrap();
        assert!(!ended, "an ended election is not a shutdown");

        // Shutdown while leading: the controller stops and elect says so.
        let (leader_tx, leader) = watch::channel(true);
        let (shutdown_tx, shutdown) = watch::channel(false);
        let runs = Arc::new(AtomicU32::new(0));
        let elected = tokio::spawn({
            let runs = runs.clone();
            async move { elect(leader, &shutdown, reconcile(runs)).await }
        });
        settle().await;
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        shutdown_tx.send(true).unwrap();
        let stopped = tokio::time::timeout(Duration::from_secs(5), elected)
            .await
            .expect("elect returns on shutdown")
            .unwrap();
        assert!(stopped);
        // Every receiver of the leader state is gone: the lease task would
        // now give the Lease up.
        assert!(leader_tx.is_closed());
    }
}
