//! The worker thread kept polling for work for a while after its last, before it
//! sleeps.
//!
//! At one client every step crosses from the calls' thread back to the worker, and
//! each crossing woke the worker asleep in `epoll_wait`: the calls' thread's write to
//! its `eventfd` took 9-11 µs, and the worker ran 20-29 µs later, its idle vCPU
//! halted and woken by the machine's monitor. A worker that keeps polling its
//! runtime's queues and sockets after it went idle takes the answer, and the
//! client's next request, without either. It offers its CPU to any other thread at
//! each poll and stops as soon as one takes it, and it does not poll while it works
//! more than half its time: under load the CPU goes to the work (BENCHMARKS.md,
//! "Tried and kept"; polling the calls' thread as well cost 7% of the tasks a second
//! at 64 clients, "Tried and not kept").

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::{Builder, Handle};
use tokio::sync::Notify;

/// Between two polls, more of this thread's CPU than this means that other work ran
/// on it: its budget starts again.
const OTHER_WORK: Duration = Duration::from_micros(4);

/// Off its CPU for longer than this while it offered the CPU to others, the thread
/// stops polling: another thread wanted the CPU.
const CPU_WANTED: Duration = Duration::from_micros(10);

/// Above this share of its time at work (polling aside), a thread does not poll.
const LOADED: f64 = 0.5;

/// Keeps a runtime's thread polling for work for `budget` after its last.
#[derive(Clone)]
pub struct Polling {
    budget: Duration,
    /// Told whenever the thread wakes from sleep.
    woken: Arc<Notify>,
}

impl Polling {
    /// Polling for `budget`, none when it is zero; `builder` is the runtime's, whose
    /// thread then tells the poller when it wakes. For a runtime of one thread.
    pub fn new(budget: Duration, builder: &mut Builder) -> Self {
        let woken = Arc::new(Notify::new());
        if !budget.is_zero() {
            let woken = Arc::clone(&woken);
            builder.on_thread_unpark(move || woken.notify_one());
        }
        Self { budget, woken }
    }

    /// Starts polling on `runtime`, the one built by `new`'s builder: a task that,
    /// each time the thread wakes, yields to the runtime (which then polls its
    /// sockets and timers without sleeping) until `budget` has passed without other
    /// work, or another thread wanted the CPU.
    pub fn start(&self, runtime: &Handle) {
        if self.budget.is_zero() {
            return;
        }
        let Self { budget, woken } = self.clone();
        runtime.spawn(async move {
            let mut load = Load::new();
            loop {
                woken.notified().await;
                if load.at_wake_up() > LOADED {
                    continue;
                }
                let mut idle_since = Instant::now();
                let mut cpu = thread_cpu();
                while idle_since.elapsed() < budget {
                    tokio::task::yield_now().await;
                    let (offered_at, cpu_then) = (Instant::now(), thread_cpu());
                    let between = cpu_then.saturating_sub(cpu);
                    if between > OTHER_WORK {
                        idle_since = offered_at;
                    } else {
                        load.polled += between;
                    }
                    std::thread::yield_now();
                    cpu = thread_cpu();
                    let offering = cpu.saturating_sub(cpu_then);
                    load.polled += offering;
                    if offered_at.elapsed().saturating_sub(offering) > CPU_WANTED {
                        break;
                    }
                }
            }
        });
    }
}

/// How much of its time a thread works, polling aside: a moving average over the
/// spans between its wake-ups.
struct Load {
    since: Instant,
    cpu_since: Duration,
    /// The CPU the poller used since `since`.
    polled: Duration,
    average: f64,
}

impl Load {
    fn new() -> Self {
        Self {
            since: Instant::now(),
            cpu_since: thread_cpu(),
            polled: Duration::ZERO,
            average: 0.0,
        }
    }

    /// At a wake-up: the share of its time the thread has worked, on average.
    fn at_wake_up(&mut self) -> f64 {
        let (now, cpu) = (Instant::now(), thread_cpu());
        let worked = cpu
            .saturating_sub(self.cpu_since)
            .saturating_sub(self.polled);
        let span = now.duration_since(self.since).as_secs_f64();
        if span > 0.0 {
            let share = (worked.as_secs_f64() / span).min(1.0);
            self.average = 0.8 * self.average + 0.2 * share;
        }
        (self.since, self.cpu_since, self.polled) = (now, cpu, Duration::ZERO);
        self.average
    }
}

/// The CPU time this thread has used.
fn thread_cpu() -> Duration {
    let used = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(used.tv_sec).unwrap_or_default(),
        u32::try_from(used.tv_nsec).unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};

    use super::*;

    /// A current-thread runtime polling for `budget`, on a thread of its own pinned
    /// to `cpu` if given; its handle.
    fn polling_runtime(budget: Duration, cpu: Option<usize>) -> Handle {
        let mut builder = tokio::runtime::Builder::new_current_thread();
        let polling = Polling::new(budget, &mut builder);
        let runtime = builder.enable_all().build().expect("a runtime");
        let handle = runtime.handle().clone();
        polling.start(&handle);
        std::thread::spawn(move || {
            if let Some(cpu) = cpu {
                pin_to(cpu);
            }
            runtime.block_on(std::future::pending::<()>());
        });
        handle
    }

    /// The first CPU this process may run on.
    fn first_cpu() -> usize {
        let allowed = sched_getaffinity(None).expect("the CPUs allowed");
        (0..CpuSet::MAX_CPU)
            .find(|&cpu| allowed.is_set(cpu))
            .expect("a CPU")
    }

    fn pin_to(cpu: usize) {
        let mut set = CpuSet::new();
        set.set(cpu);
        sched_setaffinity(None, &set).expect("pinned");
    }

    /// Wakes `runtime`'s thread with a task from this one, then waits (a minute at
    /// most, then fails) until it has gone back to sleep.
    fn woken_until_asleep_again(runtime: &Handle) {
        let parks = || runtime.metrics().worker_park_count(0);
        let asleep_after = |before: u64| {
            let deadline = Instant::now() + Duration::from_secs(60);
            while parks() <= before {
                assert!(Instant::now() < deadline, "the thread did not sleep again");
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        asleep_after(0);
        let before = parks();
        let (ran, done) = std::sync::mpsc::channel();
        runtime.spawn(async move { ran.send(()) });
        done.recv().expect("the task ran");
        asleep_after(before);
    }

    #[test]
    fn a_thread_sleeps_once_its_budget_has_passed_without_work() {
        woken_until_asleep_again(&polling_runtime(Duration::from_millis(5), None));
    }

    #[test]
    fn a_thread_stops_polling_when_another_thread_wants_its_cpu() {
        let cpu = first_cpu();
        let runtime = polling_runtime(Duration::from_secs(3600), Some(cpu));
        let stop = Arc::new(AtomicBool::new(false));
        let busy = std::thread::spawn({
            let stop = Arc::clone(&stop);
            move || {
                pin_to(cpu);
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            }
        });
        woken_until_asleep_again(&runtime);
        stop.store(true, Ordering::Relaxed);
        busy.join().expect("the busy thread");
    }
}
