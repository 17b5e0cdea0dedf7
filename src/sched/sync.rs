//! The one synchronization seam of the crate.
//!
//! Scheduler code imports its mutex, `Arc` and atomics only from here. Under
//! `--cfg writ_loom` they are loom's, so the model checker sees every lock
//! acquisition; otherwise they are `parking_lot`'s mutex (no poisoning) and
//! `std`'s `Arc`. A crate-specific cfg is used because a plain `cfg(loom)`
//! would also switch tokio's internals.

#[cfg(not(writ_loom))]
mod imp {
    pub(crate) use std::sync::Arc;
    pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

    /// A mutex whose `lock` never reports poisoning: a panic while holding the
    /// scheduler's lock leaves plain data behind, and guards must still be able
    /// to release during unwinding.
    #[derive(Default)]
    pub(crate) struct Mutex<T>(parking_lot::Mutex<T>);

    pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(parking_lot::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock()
        }

        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            self.0.try_lock()
        }
    }
}

#[cfg(writ_loom)]
mod imp {
    pub(crate) use loom::sync::Arc;
    pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

    /// loom's mutex behind the same interface as the production one.
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            // A panicking loom thread fails the model anyway; the data is
            // still consistent for the guards that release during unwinding.
            self.0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        }

        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            self.0.try_lock().ok()
        }
    }
}

pub(crate) use imp::{Arc, AtomicU64, Mutex, MutexGuard, Ordering};
