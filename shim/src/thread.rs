//! The shim's per-thread state: one thread-local, one lookup.
//!
//! Every field is a `Cell` (or cells) with a `const` initial value and
//! nothing to drop, so the thread-local needs no lazy initialisation and
//! no destructor registration: a thread's first hooked call costs nothing
//! more than its later ones. Each concern keeps its own logic and reaches
//! its field through [`with`].

use crate::accounting::devices::LastContext;
use crate::compute::bucket::LaneCache;
use std::cell::Cell;

/// What the shim remembers about one thread.
pub(crate) struct ThreadState {
    /// The thread is inside a hook ([`crate::guard::Guard`]).
    pub(crate) inside: Cell<bool>,
    /// The thread resolves a library's table (`real`), so that a call back
    /// into the shim from a library constructor gets `None` instead of a
    /// deadlock.
    pub(crate) resolving: Cell<bool>,
    /// The thread's last current context and its device (`accounting::devices`).
    pub(crate) last_context: Cell<LastContext>,
    /// The shard of the in-ledger count the thread uses (`accounting::admission`),
    /// `usize::MAX` until it is chosen.
    pub(crate) in_ledger_shard: Cell<usize>,
    /// Which lane the thread's launches went to (`compute::bucket`).
    pub(crate) lanes: LaneCache,
}

thread_local! {
    static THREAD: ThreadState = const {
        ThreadState {
            inside: Cell::new(false),
            resolving: Cell::new(false),
            last_context: Cell::new(LastContext::NONE),
            in_ledger_shard: Cell::new(usize::MAX),
            lanes: LaneCache::new(),
        }
    };
}

/// Runs `f` on the calling thread's state; `None` once the thread's
/// thread-locals are destroyed (it is exiting).
#[inline]
pub(crate) fn with<R>(f: impl FnOnce(&ThreadState) -> R) -> Option<R> {
    THREAD.try_with(f).ok()
}
