//! State that the layers above the scheduler attach to a session or an actor.
//!
//! The file tools keep read marks per actor and a last-writer record per
//! session; history keeps its store per session. The scheduler must not name
//! those types (imports point down), yet their lifetime is the session's or
//! the actor's. So each handle carries one small typed map, filled on first
//! use by the layer that owns the type, and dropped with the handle.
//!
//! A map rather than one field per layer: the scheduler then needs no change
//! when a layer above adds session state.

use std::any::{Any, TypeId};
use std::sync::Arc;

/// A typed map with at most one value per type, each created on first use.
#[derive(Default)]
pub(crate) struct Extensions {
    /// Few entries (one per layer), so a vector beats a hash map. A leaf
    /// lock: never held while taking another, and never while `init` runs.
    slots: parking_lot::Mutex<Vec<(TypeId, Arc<dyn Any + Send + Sync>)>>,
}

impl Extensions {
    /// The value of type `T`, made by `init` if there is none yet. When two
    /// callers race to make the first one, one value wins and both get it.
    pub(crate) fn get_or_init<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        if let Some(found) = self.find::<T>() {
            return found;
        }
        let made: Arc<dyn Any + Send + Sync> = Arc::new(init());
        let mut slots = self.slots.lock();
        let entry = match slots.iter().find(|(id, _)| *id == TypeId::of::<T>()) {
            Some((_, existing)) => existing.clone(),
            None => {
                slots.push((TypeId::of::<T>(), made.clone()));
                made
            }
        };
        drop(slots);
        downcast(entry)
    }

    fn find<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let slots = self.slots.lock();
        let found = slots.iter().find(|(id, _)| *id == TypeId::of::<T>());
        found.map(|(_, value)| value.clone()).map(downcast)
    }
}

fn downcast<T: Any + Send + Sync>(value: Arc<dyn Any + Send + Sync>) -> Arc<T> {
    match value.downcast::<T>() {
        Ok(typed) => typed,
        // Entries are keyed by their own `TypeId`, so this cannot happen.
        Err(_) => unreachable!("an extension stored under another type's id"),
    }
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never blocks: a Debug that waits on a lock can hang a panic report.
        match self.slots.try_lock() {
            Some(slots) => write!(f, "Extensions({} entries)", slots.len()),
            None => f.write_str("Extensions(<locked>)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_value_per_type_made_once() {
        let ext = Extensions::default();
        let a = ext.get_or_init(|| 1u32);
        let b = ext.get_or_init(|| 2u32);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(*b, 1);
        assert_eq!(*ext.get_or_init(|| String::from("s")), "s");
    }
}
