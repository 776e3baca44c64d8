//! The webhook's shared budgets: reviews in flight, request body bytes
//! (two lanes), unsent answer bytes and turns at the big-review worker.
//! Each has a total and a per-connection share:
//!
//! - over its share, a request is refused at once (503), before anything
//!   is computed for it: one connection never holds more than its share of
//!   anything, whatever it sends;
//! - when the total is short, the connection that has waited longest on
//!   its client (at least [`super::conn::EVICT_AFTER`]) among those holding
//!   some is evicted ([`super::conn::Registry::evict_holder`]) and its room
//!   handed to the request at once: what a stalled client holds goes to a
//!   newer request, never the other way round. Only a connection whose
//!   client has taken a review's answer whole, and that holds less than
//!   half its share, evicts; any other waits for room (or is refused);
//! - clients that have never taken an answer whole hold at most three
//!   quarters of each budget between them: the last quarter is always
//!   there for those that read their answers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::conn::{Conn, ConnState, Resource};

/// A shared budget of one [`Resource`].
pub(crate) struct Budget {
    resource: Resource,
    total: usize,
    share: usize,
    room: Arc<Semaphore>,
    /// Room handed over from evicted connections that still hold it (until
    /// they go): memory over the total, kept under a quarter of it.
    unsettled: Arc<AtomicUsize>,
    /// What clients that have never taken an answer whole may hold, over
    /// all of them: three quarters of the total. The last quarter is for
    /// those that read their answers (the API server's connections), so
    /// that however many clients hold room and go, one of those always
    /// finds some.
    untrusted: Arc<Semaphore>,
}

/// Why room was not given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Short {
    /// The connection already holds its share.
    Share { resource: Resource, share: usize },
    /// No room within the time allowed.
    Busy { resource: Resource },
}

impl Short {
    pub(crate) fn describe(self) -> String {
        match self {
            Self::Share { resource, share } => format!(
                "this connection holds its share of {} ({share}): try again on another connection",
                resource.as_str()
            ),
            Self::Busy {
                resource: Resource::BigBodies,
            } => "too many request bytes in flight (--max-body-bytes-in-flight): try again"
                .to_owned(),
            Self::Busy { resource } => format!(
                "no room for {} in flight (a budget shared by every connection): try again",
                resource.as_str()
            ),
        }
    }
}

/// How long a request may wait for room.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    /// As long as it takes (the caller bounds the wait).
    Unbounded,
    /// Only for the room of connections evicted (for it, or still going),
    /// at most this long; otherwise refused at once.
    ForEvicted(Duration),
}

/// How often a waiting request looks for a connection to evict anew (one
/// may have become stalled since).
const RETRY: Duration = Duration::from_millis(10);

impl Budget {
    pub(crate) fn new(resource: Resource, total: usize, share: usize) -> Self {
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            resource,
            total,
            share: share.clamp(1, total),
            room: Arc::new(Semaphore::new(total)),
            unsettled: Arc::new(AtomicUsize::new(0)),
            untrusted: Arc::new(Semaphore::new((total - total / 4).max(1))),
        }
    }

    /// Room not yet taken.
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.room.available_permits()
    }

    /// No room yet, for a request of `conn` to grow.
    pub(crate) fn none(&self, conn: &Conn) -> Room {
        Room {
            permit: None,
            untrusted: None,
            handed: 0,
            len: 0,
            state: conn.state.clone(),
            resource: self.resource,
            budget: self.room.clone(),
            unsettled: self.unsettled.clone(),
        }
    }

    /// `room` grown to at least `len`.
    pub(crate) async fn grow_to(
        &self,
        conn: &Conn,
        room: &mut Room,
        len: usize,
        wait: Wait,
    ) -> Result<(), Short> {
        let more = len.saturating_sub(room.len);
        self.grow(conn, room, more, wait).await
    }

    /// `n` more for `room`, a request of `conn` (see the module's rules).
    pub(crate) async fn grow(
        &self,
        conn: &Conn,
        room: &mut Room,
        n: usize,
        wait: Wait,
    ) -> Result<(), Short> {
        if n == 0 {
            return Ok(());
        }
        let busy = Short::Busy {
            resource: self.resource,
        };
        if n > self.total {
            return Err(busy);
        }
        let held = conn.state.add_held(self.resource, n);
        // A connection evicts others only once its client has taken a
        // review's answer whole, and while it holds less than half its
        // share: one that has never read an answer (as every hostage-taker)
        // or already holds much waits for room, or is refused.
        let may_evict = conn.state.has_answered() && held - n < self.share / 2;
        if held > self.share {
            conn.state.sub_held(self.resource, n);
            return Err(Short::Share {
                resource: self.resource,
                share: self.share,
            });
        }
        // From here on `n` is counted as the connection's; handed to the
        // room on success, given back otherwise.
        let counted = Counted {
            state: &conn.state,
            resource: self.resource,
            n,
        };
        let give_up = match wait {
            Wait::Unbounded => None,
            Wait::ForEvicted(d) => Some(Instant::now() + d),
        };
        // A client that has never taken an answer whole takes its room in
        // the untrusted three quarters first: refused at once when they
        // are full (but for a body's read, which waits, bounded by its
        // caller).
        let mut untrusted = None;
        if !conn.state.has_answered() {
            let want = u32::try_from(n).map_err(|_| busy)?;
            let part = match wait {
                Wait::ForEvicted(_) => self.untrusted.clone().try_acquire_many_owned(want).ok(),
                Wait::Unbounded => self.untrusted.clone().acquire_many_owned(want).await.ok(),
            };
            match part {
                Some(p) => untrusted = Some(p),
                None => return Err(busy),
            }
        }
        // Room is free room, or the room of a connection evicted for it:
        // handed over at once (the evicted connection's own permits are
        // forgotten as it goes, these given back when this room goes), so
        // that what a stalled client held goes to the request that needed
        // it, not to whoever waits first.
        let mut need = n;
        let mut handed = 0;
        let mut permit: Option<OwnedSemaphorePermit> = None;
        let taken =
            |p: OwnedSemaphorePermit, permit: &mut Option<OwnedSemaphorePermit>| match permit {
                Some(have) => have.merge(p),
                None => *permit = Some(p),
            };
        let outcome = loop {
            let want = u32::try_from(need).unwrap_or(u32::MAX);
            if let Ok(p) = self.room.clone().try_acquire_many_owned(want) {
                taken(p, &mut permit);
                break Ok(());
            }
            // What evicted connections still hold stays under a quarter of
            // the total: past it, a request waits for their room to come
            // back as anyone would.
            let mut may_hand =
                (self.total / 4).saturating_sub(self.unsettled.load(Ordering::Relaxed));
            while may_evict && need > 0 && may_hand > 0 {
                let Some(victim) = conn.registry.evict_holder(self.resource, conn.state.id())
                else {
                    break;
                };
                let claim = victim.claim(self.resource, need.min(may_hand));
                self.unsettled.fetch_add(claim, Ordering::Relaxed);
                handed += claim;
                need -= claim;
                may_hand -= claim;
            }
            if need == 0 {
                break Ok(());
            }
            // Refused at once unless room is on its way back: handed over
            // to this request, or (for a client that reads its answers)
            // still held by connections evicted and going.
            if matches!(wait, Wait::ForEvicted(_))
                && handed == 0
                && !(conn.state.has_answered() && self.unsettled.load(Ordering::Relaxed) > 0)
            {
                break Err(busy);
            }
            let slice = match give_up {
                Some(end) if Instant::now() >= end => break Err(busy),
                Some(end) => (end - Instant::now()).min(RETRY),
                None => RETRY,
            };
            let want = u32::try_from(need).unwrap_or(u32::MAX);
            match tokio::time::timeout(slice, self.room.clone().acquire_many_owned(want)).await {
                Ok(Ok(p)) => {
                    taken(p, &mut permit);
                    break Ok(());
                }
                Ok(Err(_)) => break Err(busy),
                Err(_) => continue,
            }
        };
        if let Err(e) = outcome {
            // What was handed over goes back to the budget (its connection
            // forgets it as it goes); the rest is dropped as it was taken.
            self.room.add_permits(handed);
            return Err(e);
        }
        std::mem::forget(counted);
        room.len += n;
        room.handed += handed;
        match (&mut room.untrusted, untrusted) {
            (Some(have), Some(p)) => have.merge(p),
            (None, Some(p)) => room.untrusted = Some(p),
            (_, None) => {}
        }
        match (&mut room.permit, permit) {
            (Some(have), Some(p)) => have.merge(p),
            (None, Some(p)) => room.permit = Some(p),
            (_, None) => {}
        }
        Ok(())
    }
}

/// Gives back a connection's count if room was not given.
struct Counted<'a> {
    state: &'a Arc<ConnState>,
    resource: Resource,
    n: usize,
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.state.sub_held(self.resource, self.n);
    }
}

/// Room a request holds in a [`Budget`], counted as its connection's
/// until dropped: permits of the budget's semaphore, and room handed over
/// from evicted connections.
pub(crate) struct Room {
    permit: Option<OwnedSemaphorePermit>,
    /// Its part of the untrusted three quarters, taken while its client
    /// had never taken an answer whole.
    untrusted: Option<OwnedSemaphorePermit>,
    /// Room handed over from evicted connections (no permits: theirs are
    /// forgotten as they go), given back to the budget when released.
    handed: usize,
    len: usize,
    state: Arc<ConnState>,
    resource: Resource,
    budget: Arc<Semaphore>,
    unsettled: Arc<AtomicUsize>,
}

impl Room {
    /// The connection whose room it is.
    pub(crate) fn state(&self) -> &Arc<ConnState> {
        &self.state
    }

    /// Gives back all but `keep`.
    pub(crate) fn shrink_to(&mut self, keep: usize) {
        if keep < self.len {
            self.release(self.len - keep);
        }
    }

    /// Gives back `n` (handed-over room first, then permits), but what its
    /// connection owes to a request it was evicted for: that is the other
    /// request's now, and is kept out of the budget (its permits
    /// forgotten).
    fn release(&mut self, n: usize) {
        let owed = self.state.settle(self.resource, n);
        self.unsettled.fetch_sub(owed, Ordering::Relaxed);
        let from_handed = n.min(self.handed);
        self.handed -= from_handed;
        let kept_out = owed.min(from_handed);
        self.budget.add_permits(from_handed - kept_out);
        let from_permits = n - from_handed;
        if let Some(mut back) = self.permit.as_mut().and_then(|p| p.split(from_permits)) {
            if let Some(gone) = back.split(owed - kept_out) {
                gone.forget();
            }
        }
        if let Some(p) = &mut self.untrusted {
            let back = n.min(p.num_permits());
            drop(p.split(back));
        }
        self.state.sub_held(self.resource, n);
        self.len -= n;
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        self.release(self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::conn::Registry;

    /// A budget of 100 all held by the first of two connections whose
    /// clients read answers before (so either may hold all of it): the
    /// budget, the holder, the other, and the holder's room.
    async fn one_holds_it_all(registry: &Arc<Registry>) -> (Budget, Conn, Conn, Room) {
        let budget = Budget::new(Resource::Answers, 100, 100);
        let (stalled, newer) = (Conn::admitted(registry), Conn::admitted(registry));
        stalled.state.answered_whole();
        newer.state.answered_whole();
        let mut held = budget.none(&stalled);
        budget
            .grow(&stalled, &mut held, 100, Wait::Unbounded)
            .await
            .unwrap();
        (budget, stalled, newer, held)
    }

    /// A connection that has waited on its client longer than a newer
    /// request can wait for room is evicted for it, and its room handed
    /// over at once — not left to whoever waits first — while the budget's
    /// total comes back whole once both are gone, in either order. What
    /// evicted connections still hold stays under a quarter of the total.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_holders_room_is_handed_to_the_request_it_is_evicted_for() {
        for victim_goes_first in [true, false] {
            let registry = Registry::for_test(4);
            let (budget, stalled, newer, held) = one_holds_it_all(&registry).await;
            tokio::time::advance(Duration::from_millis(20)).await;
            // Not yet stalled for 50 ms: nothing to evict, refused.
            let mut room = budget.none(&newer);
            let refused = budget
                .grow(&newer, &mut room, 20, Wait::ForEvicted(Duration::ZERO))
                .await;
            assert!(refused.is_err());
            assert_eq!(newer.state.holds(Resource::Answers), 0);
            tokio::time::advance(Duration::from_millis(100)).await;
            let started = Instant::now();
            budget
                .grow(
                    &newer,
                    &mut room,
                    20,
                    Wait::ForEvicted(Duration::from_secs(1)),
                )
                .await
                .unwrap();
            assert_eq!(
                started.elapsed(),
                Duration::ZERO,
                "handed over, not waited for"
            );
            assert_eq!(budget.available(), 0);
            assert_eq!(budget.unsettled.load(Ordering::Relaxed), 20);
            if victim_goes_first {
                drop(held);
                assert_eq!(budget.available(), 80, "20 of its 100 were handed over");
                drop(room);
            } else {
                drop(room);
                assert_eq!(budget.available(), 20);
                drop(held);
            }
            assert_eq!(budget.available(), 100);
            assert_eq!(budget.unsettled.load(Ordering::Relaxed), 0);
            assert_eq!(stalled.state.holds(Resource::Answers), 0);
            assert_eq!(newer.state.holds(Resource::Answers), 0);
        }
    }

    /// Clients that never took an answer whole hold at most three quarters
    /// of a budget between them: past that one is refused (or, reading a
    /// body, waits), and the last quarter goes to a client that reads.
    #[tokio::test]
    async fn clients_that_never_read_an_answer_leave_a_quarter_of_a_budget() {
        let registry = Registry::for_test(4);
        let budget = Budget::new(Resource::Answers, 100, 100);
        let (a, b, reader) = (
            Conn::admitted(&registry),
            Conn::admitted(&registry),
            Conn::admitted(&registry),
        );
        reader.state.answered_whole();
        let wait = Wait::ForEvicted(Duration::ZERO);
        let (mut ra, mut rb, mut rr) = (budget.none(&a), budget.none(&b), budget.none(&reader));
        budget.grow(&a, &mut ra, 50, wait).await.unwrap();
        budget.grow(&b, &mut rb, 25, wait).await.unwrap();
        assert!(
            budget.grow(&b, &mut rb, 1, wait).await.is_err(),
            "past three quarters"
        );
        budget.grow(&reader, &mut rr, 25, wait).await.unwrap();
        assert_eq!(budget.available(), 0);
        drop(ra);
        // What an untrusted client gives back is theirs to take again.
        budget.grow(&b, &mut rb, 50, wait).await.unwrap();
    }

    /// Past a quarter of the total held by evicted connections, a request
    /// is not handed more: it waits for room as anyone would.
    #[tokio::test(start_paused = true)]
    async fn no_more_than_a_quarter_of_a_budget_is_handed_over() {
        let registry = Registry::for_test(4);
        let (budget, _stalled, newer, held) = one_holds_it_all(&registry).await;
        tokio::time::advance(Duration::from_millis(100)).await;
        let mut room = budget.none(&newer);
        let wait = Wait::ForEvicted(Duration::from_millis(50));
        assert!(budget.grow(&newer, &mut room, 60, wait).await.is_err());
        // What was claimed went back: the victim forgets it as it goes.
        assert_eq!(budget.unsettled.load(Ordering::Relaxed), 25);
        drop(held);
        assert_eq!(budget.unsettled.load(Ordering::Relaxed), 0);
        assert_eq!(budget.available(), 100);
    }
}
