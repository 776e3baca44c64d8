//! The webhook's shared budgets: reviews in flight, request body bytes
//! (two lanes), unsent answer bytes and turns at the big-review worker.
//! Each has a total and a per-connection share:
//!
//! - over its share, a request is refused at once (503), before anything
//!   is computed for it: one connection never holds more than its share of
//!   anything, whatever it sends;
//! - when the total is short, the connection that has waited longest on
//!   its client (at least [`super::conn::EVICT_AFTER`]) among those holding
//!   some is evicted ([`super::conn::Registry::evict_holder`]), and the
//!   request waits for the room to come back: what a stalled client holds
//!   goes to a newer request, never the other way round.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::conn::{Conn, ConnState, Reading, Resource};

/// A shared budget of one [`Resource`].
pub(crate) struct Budget {
    resource: Resource,
    total: usize,
    share: usize,
    room: Arc<Semaphore>,
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
    /// Only for the room of a connection just evicted, at most this long;
    /// otherwise refused at once.
    ForEvicted(Duration),
}

/// How often a waiting request looks for a connection to evict anew (one
/// may have become stalled since).
const RETRY: Duration = Duration::from_millis(100);

impl Budget {
    pub(crate) fn new(resource: Resource, total: usize, share: usize) -> Self {
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            resource,
            total,
            share: share.clamp(1, total),
            room: Arc::new(Semaphore::new(total)),
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
            len: 0,
            state: conn.state.clone(),
            resource: self.resource,
        }
    }

    /// `room` grown to at least `len`, waiting as long as it takes (the
    /// caller bounds the wait).
    pub(crate) async fn grow_to(
        &self,
        conn: &Conn,
        room: &mut Room,
        len: usize,
        reading: Option<&Reading>,
    ) -> Result<(), Short> {
        let more = len.saturating_sub(room.len);
        self.grow(conn, room, more, Wait::Unbounded, reading).await
    }

    /// `n` more for `room`, a request of `conn` (see the module's rules).
    /// While it waits, `reading` (the request's body read) is paused: the
    /// wait is dljob's, not the client's.
    pub(crate) async fn grow(
        &self,
        conn: &Conn,
        room: &mut Room,
        n: usize,
        wait: Wait,
        reading: Option<&Reading>,
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
        let permits = u32::try_from(n).map_err(|_| busy)?;
        let give_up = match wait {
            Wait::Unbounded => None,
            Wait::ForEvicted(d) => Some(Instant::now() + d),
        };
        let (mut paused, mut evicted) = (false, false);
        let permit = loop {
            if let Ok(p) = self.room.clone().try_acquire_many_owned(permits) {
                break p;
            }
            evicted |= conn.registry.evict_holder(self.resource, conn.state.id());
            if !evicted && matches!(wait, Wait::ForEvicted(_)) {
                return Err(busy);
            }
            if let (Some(r), false) = (reading, paused) {
                r.pause();
                paused = true;
            }
            let slice = match give_up {
                Some(end) if Instant::now() >= end => return Err(busy),
                Some(end) => (end - Instant::now()).min(RETRY),
                None => RETRY,
            };
            match tokio::time::timeout(slice, self.room.clone().acquire_many_owned(permits)).await {
                Ok(Ok(p)) => break p,
                Ok(Err(_)) => return Err(busy),
                Err(_) => continue,
            }
        };
        if let (Some(r), true) = (reading, paused) {
            r.progress();
        }
        std::mem::forget(counted);
        room.len += n;
        match &mut room.permit {
            Some(p) => p.merge(permit),
            None => room.permit = Some(permit),
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
/// until dropped.
pub(crate) struct Room {
    permit: Option<OwnedSemaphorePermit>,
    len: usize,
    state: Arc<ConnState>,
    resource: Resource,
}

impl Room {
    /// Gives back all but `keep`.
    pub(crate) fn shrink_to(&mut self, keep: usize) {
        if keep >= self.len {
            return;
        }
        let back = self.len - keep;
        if let Some(p) = &mut self.permit {
            drop(p.split(back));
        }
        self.state.sub_held(self.resource, back);
        self.len = keep;
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        self.state.sub_held(self.resource, self.len);
    }
}
