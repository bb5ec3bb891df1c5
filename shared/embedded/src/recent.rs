//! The committed state of the tasks written lately, decoded, in memory.
//!
//! The scheduler reads its task at every message and a waiting caller at every
//! change. From SQLite, each read is a page cache dropped because a commit came
//! since (WAL), page reads and a JSON parse; from here it is a clone. Only this
//! process writes the database, and its writer thread puts a task here once its
//! write is committed and before it answers any write of that commit, so a read here
//! after any answer (a conflict's, say) or any message published after it is never
//! older than one of SQLite would be. What is not here is read from SQLite.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use foldhash::HashMap;
use sas_domain::ids::TaskId;
use sas_domain::task::{Order, Task};

/// Tasks kept at most (the oldest written first out): several times the tasks in
/// flight at any concurrency the API serves.
const KEPT: usize = 8192;

#[derive(Default)]
pub(crate) struct Recent {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    tasks: HashMap<TaskId, (Task, Option<Order>)>,
    arrivals: VecDeque<TaskId>,
}

impl Recent {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn task(&self, id: &TaskId) -> Option<Task> {
        self.kept().tasks.get(id).map(|(task, _)| task.clone())
    }

    /// Whether the task kept is the version before `task`'s with the same search
    /// attributes: its write then leaves their rows as they are.
    pub(crate) fn attributes_kept(&self, task: &Task) -> bool {
        let kept = self.kept();
        kept.tasks.get(&task.id).is_some_and(|(before, _)| {
            before.version + 1 == task.version && before.attributes == task.attributes
        })
    }

    /// The task with its order data, if both are here.
    pub(crate) fn task_with_order(&self, id: &TaskId) -> Option<(Task, Order)> {
        let kept = self.kept();
        let (task, order) = kept.tasks.get(id)?;
        Some((task.clone(), order.clone()?))
    }

    /// Keeps a committed task (and its order data, when written with it); an older
    /// version than the one kept changes nothing.
    pub(crate) fn put(&self, task: Task, order: Option<Order>) {
        let mut kept = self.kept();
        let id = task.id.clone();
        if let Some((current, current_order)) = kept.tasks.get_mut(&id) {
            if current.version < task.version {
                *current = task;
                if order.is_some() {
                    *current_order = order;
                }
            }
            return;
        }
        kept.tasks.insert(id.clone(), (task, order));
        kept.arrivals.push_back(id);
        while kept.arrivals.len() > KEPT {
            if let Some(oldest) = kept.arrivals.pop_front() {
                kept.tasks.remove(&oldest);
            }
        }
    }
}
