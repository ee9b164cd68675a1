//! The threads connections run on: kept after their work and reused, so that a connection
//! does not start a thread (a small request costs less than a thread's start on a busy
//! machine). A job never waits for a thread: when none is idle a new one starts, since a
//! tunnel may hold its thread for hours and a fixed number could be all taken. A thread idle
//! for [`IDLE`] ends.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How long a thread waits for work before it ends.
const IDLE: Duration = Duration::from_secs(30);

type Job = Box<dyn FnOnce() + Send>;

/// A set of threads that run jobs. Cloning gives another handle to the same threads.
#[derive(Clone, Default)]
pub struct Pool {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    state: Mutex<State>,
    work: Condvar,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// Threads waiting for a job.
    idle: usize,
    /// Set when the proxy stops: idle threads end, and no job is queued.
    closed: bool,
}

impl Pool {
    /// Runs `job` on an idle thread, or on a new one when every thread is busy.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) -> io::Result<()> {
        let job: Job = Box::new(job);
        let mut state = self.lock();
        // Each queued job has an idle thread of its own to take it.
        if state.idle > state.jobs.len() && !state.closed {
            state.jobs.push_back(job);
            drop(state);
            self.inner.work.notify_one();
            return Ok(());
        }
        drop(state);
        let inner = self.inner.clone();
        std::thread::Builder::new()
            .name("egress-conn".into())
            .spawn(move || {
                job();
                work(&inner);
            })
            .map(drop)
    }

    /// Lets idle threads end; busy ones end after their job.
    pub fn close(&self) {
        self.lock().closed = true;
        self.inner.work.notify_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A thread's life after its first job: take queued jobs until idle too long or closed.
fn work(inner: &Inner) {
    let mut state = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(job) = state.jobs.pop_front() {
            drop(state);
            job();
            state = inner.state.lock().unwrap_or_else(|e| e.into_inner());
            continue;
        }
        if state.closed {
            return;
        }
        state.idle += 1;
        let (next, waited) = inner
            .work
            .wait_timeout(state, IDLE)
            .unwrap_or_else(|e| e.into_inner());
        state = next;
        state.idle -= 1;
        if waited.timed_out() && state.jobs.is_empty() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Sequential jobs reuse one thread; jobs that block each other all run (no fixed
    /// number of threads to run out of).
    #[test]
    fn threads_are_reused_and_never_run_out() {
        let pool = Pool::default();
        let (tx, rx) = mpsc::channel();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..20 {
            let tx = tx.clone();
            pool.run(move || tx.send(std::thread::current().id()).unwrap())
                .unwrap();
            seen.insert(rx.recv().unwrap());
            // Let the thread go back to waiting.
            while pool.lock().idle == 0 {
                std::thread::yield_now();
            }
        }
        assert_eq!(seen.len(), 1, "{seen:?}");
        // 50 jobs that each wait for the next one's start: all must run at once.
        let barrier = Arc::new(std::sync::Barrier::new(50));
        let (done_tx, done_rx) = mpsc::channel();
        for _ in 0..50 {
            let (b, d) = (barrier.clone(), done_tx.clone());
            pool.run(move || {
                b.wait();
                d.send(()).unwrap();
            })
            .unwrap();
        }
        for _ in 0..50 {
            done_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        pool.close();
    }
}
