//! The task-local owner map (see `docs/lifecycle.md`, "The in-process owner").
//!
//! A `with_lease` scope installs `(lifecycle instance, key) -> owner` in a copy of the outer
//! map for the duration of its callback. Nested calls in the same task see it; other tasks
//! (a spawned peer) and other lifecycle instances do not. The map also records the lifecycle
//! instances whose exclusive mutation fence the task is running inside.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use tether_core::BindingKey;

use super::owner::OwnerState;

tokio::task_local! {
    static FRAME: Arc<Frame>;
}

#[derive(Debug, Default, Clone)]
struct Frame {
    owners: HashMap<(u64, BindingKey), Arc<OwnerState>>,
    exclusive: HashSet<u64>,
    mutating: HashSet<u64>,
}

fn current_frame() -> Frame {
    FRAME.try_with(|f| (**f).clone()).unwrap_or_default()
}

/// The owner of `key` for lifecycle `instance` in the current task's scope.
pub(crate) fn current_owner(instance: u64, key: &BindingKey) -> Option<Arc<OwnerState>> {
    FRAME
        .try_with(|f| f.owners.get(&(instance, key.clone())).cloned())
        .ok()
        .flatten()
}

/// Whether the current task runs inside lifecycle `instance`'s exclusive fence.
pub(crate) fn in_exclusive(instance: u64) -> bool {
    FRAME
        .try_with(|f| f.exclusive.contains(&instance))
        .unwrap_or(false)
}

/// Whether the current task runs inside a counted mutation of lifecycle `instance`.
pub(crate) fn in_mutation(instance: u64) -> bool {
    FRAME
        .try_with(|f| f.mutating.contains(&instance))
        .unwrap_or(false)
}

/// Runs `fut` marked as inside a counted mutation of lifecycle `instance`.
pub(crate) async fn with_mutation<F: Future>(instance: u64, fut: F) -> F::Output {
    let mut frame = current_frame();
    frame.mutating.insert(instance);
    FRAME.scope(Arc::new(frame), fut).await
}

/// Runs `fut` with `key -> owner` added to a copy of the current map.
pub(crate) async fn with_owner<F: Future>(
    instance: u64,
    key: BindingKey,
    owner: Arc<OwnerState>,
    fut: F,
) -> F::Output {
    let mut frame = current_frame();
    frame.owners.insert((instance, key), owner);
    FRAME.scope(Arc::new(frame), fut).await
}

/// Runs `fut` marked as inside lifecycle `instance`'s exclusive fence.
pub(crate) async fn with_exclusive<F: Future>(instance: u64, fut: F) -> F::Output {
    let mut frame = current_frame();
    frame.exclusive.insert(instance);
    FRAME.scope(Arc::new(frame), fut).await
}

#[cfg(test)]
mod tests {
    use tether_core::{BindingId, LeaseToken};

    use super::*;

    fn key(name: &str) -> BindingKey {
        BindingKey::conversation(&BindingId::new(name).unwrap())
    }

    fn owner(name: &str) -> Arc<OwnerState> {
        Arc::new(OwnerState::new(
            key(name),
            LeaseToken::new("t").unwrap(),
            None,
        ))
    }

    #[tokio::test]
    async fn owners_are_scoped_to_the_task_instance_and_nesting() {
        assert!(current_owner(1, &key("a")).is_none(), "no frame at all");
        with_owner(1, key("a"), owner("a"), async {
            assert!(current_owner(1, &key("a")).is_some());
            assert!(current_owner(2, &key("a")).is_none(), "other instance");
            with_owner(1, key("b"), owner("b"), async {
                assert!(current_owner(1, &key("a")).is_some(), "outer still visible");
                assert!(current_owner(1, &key("b")).is_some());
            })
            .await;
            assert!(current_owner(1, &key("b")).is_none(), "inner scope closed");
            let spawned = tokio::spawn(async { current_owner(1, &key("a")).is_some() });
            assert!(!spawned.await.unwrap(), "another task sees nothing");
            assert!(!in_exclusive(1));
            assert!(!in_mutation(1));
            with_mutation(1, async { assert!(in_mutation(1) && !in_mutation(2)) }).await;
            with_exclusive(1, async {
                assert!(in_exclusive(1) && !in_exclusive(2));
                assert!(current_owner(1, &key("a")).is_some(), "owners kept");
            })
            .await;
        })
        .await;
    }
}
