//! Asynchronous execution: per-context work queues, a worker thread per
//! context, streams and events.
//!
//! A launch appends an [`Op`] to its context's queue under a mutex and returns;
//! the worker is woken only when it sleeps, so a launch costs no system call in
//! the common case. At [`MAX_PENDING`] queued ops a launch blocks until the
//! worker makes room, as on a real GPU.
//!
//! The worker owns a virtual clock. When the queue head is a kernel it takes
//! the device from the [`crate::sched`] scheduler, then completes as many
//! queued kernels as fit in a short horizon (at most the rest of its slice) by
//! timestamp arithmetic, sleeps once until the last of them is due, and
//! publishes their completion (stream counters, event times, busy time). A
//! record it lays out carries its time on that clock ([`Event::completed_at`]),
//! so an event is seen complete at that time, as a GPU writes a completion
//! when it happens, not when the worker next wakes; a record behind a copy
//! or a free of the same batch waits for the publication, which performs
//! them, and so do a stream's counts. A kernel longer than the slice is
//! preempted at the slice boundary and resumes on the next turn. Simulated
//! time is spent sleeping, never spinning.
//!
//! An op starts, on that clock, when the work before it has finished, when
//! it was submitted, or when the device's previous holder left off
//! (`free_at_ns` in the shared state), whichever is latest: never when the
//! worker thread happened to get to it. A worker that a loaded machine
//! wakes late therefore does not make the device slower than it is, nor
//! put the wake-up into the time between two events around a kernel; the
//! host learns of completions late, as a descheduled host thread would on a
//! real GPU. Work the worker catches up on this way lies in the past, but
//! never before another process's work on the device, so the device is
//! never busy more than all the time there is; and never more than
//! [`MAX_CATCH_UP_NS`] in the past (a longer stall loses the rest).
//!
//! One queue per context executes ops in submission order; that is one valid
//! serialisation of what the streams allow, and keeps stream order, event
//! order and synchronisation exact. Stream priorities are recorded but do not
//! reorder work. A wait on an event recorded in this context is therefore
//! already satisfied by order; a wait on another context's event is an
//! [`Op::Wait`] that holds this queue until that record completes.
//!
//! Host functions (`cuLaunchHostFunc`, `cuStreamAddCallback`) run on the
//! worker when their stream reaches them, after the work before them has
//! completed in real time and before anything after them starts; the device
//! is given back while they run, as it is during a cross-context wait.

use crate::sched::Scheduler;
use crate::sys;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The scheduler slice the worker asks for
/// ([`ledger::sched::ask_for_short_slices`]): a worker stands for a GPU,
/// which marks its work done whether or not a host CPU is free, so when it
/// wakes it should run at once, not after the slice of a process busy on
/// the CPU it shares.
const WORKER_SLICE: std::time::Duration = std::time::Duration::from_micros(100);
/// Launches pending per context before a launch blocks.
pub const MAX_PENDING: usize = 1024;
/// How far ahead of the real clock the worker completes work in one batch.
const BATCH_HORIZON_NS: u64 = 500_000;
const BATCH_MAX_OPS: usize = 4096;
/// How far into the past the worker catches up: a wake-up later than this
/// loses the rest, as every wake-up did before catching up. It is shorter
/// than [`crate::sched::STOPPED_AFTER_NS`], so a holder stopped, skipped
/// and continued in the moment before its batch can count at most this much
/// of time another process had the device.
const MAX_CATCH_UP_NS: u64 = 20_000_000;

pub struct Stream {
    pub handle: u64,
    pub ctx: u64,
    pub flags: u32,
    pub priority: i32,
    /// Ops submitted / completed on this stream (submitted is advanced under
    /// the queue lock, completed by the worker in order).
    pub submitted: AtomicU64,
    pub completed: AtomicU64,
    /// The capture this stream is in, if any ([`crate::capture`]).
    pub capture: Mutex<Option<crate::capture::Capture>>,
    /// How far into other streams this one has waited (`cuStreamWaitEvent`):
    /// (stream handle, position there), the furthest per stream. A pool
    /// that follows event dependencies reuses blocks freed before that.
    pub waited: Mutex<Vec<(u64, u64)>>,
}

impl Stream {
    pub fn new(handle: u64, ctx: u64, flags: u32, priority: i32) -> Stream {
        Stream {
            handle,
            ctx,
            flags,
            priority,
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            capture: Mutex::new(None),
            waited: Mutex::new(Vec::new()),
        }
    }

    /// Records that work queued here from now on comes after `position` of
    /// stream `stream`.
    pub fn wait_for(&self, stream: u64, position: u64) {
        if stream == self.handle {
            return;
        }
        let mut waited = lock(&self.waited);
        match waited.iter_mut().find(|(s, _)| *s == stream) {
            Some((_, p)) => *p = (*p).max(position),
            None => waited.push((stream, position)),
        }
    }

    /// Whether work queued here now comes after `position` of `stream`.
    pub fn has_waited_for(&self, stream: u64, position: u64) -> bool {
        lock(&self.waited).iter().any(|&(s, p)| s == stream && p >= position)
    }

    /// The graph this stream is capturing into, if it is in a capture
    /// (an invalidated one included).
    pub fn capturing(&self) -> Option<u64> {
        lock(&self.capture).map(|c| c.graph)
    }

    /// As [`Stream::capturing`], for work queued on the stream: work on a
    /// stream whose capture was invalidated fails with
    /// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`.
    pub fn capturing_valid(&self) -> Result<Option<u64>, abi::cuda::CUresult> {
        match *lock(&self.capture) {
            Some(c) if c.invalidated => Err(abi::cuda::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
            c => Ok(c.map(|c| c.graph)),
        }
    }
}

pub struct Event {
    pub handle: u64,
    pub flags: u32,
    /// Bumped by each record; only the latest record's completion counts.
    pub generation: AtomicU64,
    pub recorded: AtomicBool,
    pub complete: AtomicBool,
    pub time_ns: AtomicU64,
    /// Newest generation whose record has completed (records of one event
    /// on several contexts may complete out of order).
    pub done_generation: AtomicU64,
    /// The record the worker laid out on its clock (a generation; 0: none)
    /// and the time it completes there ([`Event::completed_at`]).
    pub due_generation: AtomicU64,
    pub due_ns: AtomicU64,
    /// Executor of the latest record, to wait on.
    pub exec: Mutex<Option<Arc<Executor>>>,
    /// The stream of the latest record and the record's position there.
    pub source: Mutex<(u64, u64)>,
}

impl Event {
    /// When the latest record completed on the device's clock, if it has by
    /// now: published by the worker, or laid out by it with a time that has
    /// passed. A GPU writes a completion when it happens; the worker, which
    /// lays out up to [`BATCH_HORIZON_NS`] of work at once and publishes it
    /// when it wakes at its end, would otherwise show a record in the middle
    /// of a batch late, and later still on a loaded host.
    pub fn completed_at(&self) -> Option<u64> {
        if self.complete.load(Acquire) {
            return Some(self.time_ns.load(Acquire));
        }
        let generation = self.generation.load(Acquire);
        if self.due_generation.load(Acquire) != generation {
            return None;
        }
        let due_ns = self.due_ns.load(Acquire);
        // A later record laid out meanwhile moved both on.
        if self.due_generation.load(Acquire) != generation || self.generation.load(Acquire) != generation {
            return None;
        }
        (sys::now_ns() >= due_ns).then_some(due_ns)
    }

    /// The laid-out time of the latest record, whether or not it has
    /// passed (see [`Event::completed_at`]).
    pub fn due_at(&self) -> Option<u64> {
        let generation = self.generation.load(Acquire);
        (self.due_generation.load(Acquire) == generation).then(|| self.due_ns.load(Acquire))
    }

    pub fn new(handle: u64, flags: u32) -> Event {
        Event {
            handle,
            flags,
            generation: AtomicU64::new(0),
            recorded: AtomicBool::new(false),
            complete: AtomicBool::new(true),
            time_ns: AtomicU64::new(0),
            done_generation: AtomicU64::new(0),
            due_generation: AtomicU64::new(0),
            due_ns: AtomicU64::new(0),
            exec: Mutex::new(None),
            source: Mutex::new((0, 0)),
        }
    }
}

/// An application function to call in stream order, with the pointer it
/// gave for it.
pub enum HostCall {
    /// `cuLaunchHostFunc`: `fn(userData)`.
    Func { func: unsafe extern "C" fn(*mut c_void), user_data: *mut c_void },
    /// `cuStreamAddCallback`: `callback(hStream, CUDA_SUCCESS, userData)`,
    /// with the stream handle as the application passed it.
    Callback { func: unsafe extern "C" fn(abi::cuda::CUstream, abi::cuda::CUresult, *mut c_void), stream: u64, user_data: *mut c_void },
}

// SAFETY: the pointers are the application's own; CUDA's contract is that
// they are passed back, unexamined, on a driver thread, which is what the
// worker is. simgpu never dereferences them.
unsafe impl Send for HostCall {}

impl HostCall {
    fn call(&self) {
        match *self {
            // SAFETY: calling the application's function with its own
            // argument, as cuLaunchHostFunc/cuStreamAddCallback promise.
            HostCall::Func { func, user_data } => unsafe { func(user_data) },
            // SAFETY: as above, with the stream handle the application passed.
            HostCall::Callback { func, stream, user_data } => unsafe {
                func(stream as abi::cuda::CUstream, abi::cuda::CUDA_SUCCESS, user_data)
            },
        }
    }
}

/// A stream-ordered copy or fill, performed by the worker when its stream
/// reaches it. The device side is checked again then: memory freed in the
/// meantime is left alone (a real GPU would fault).
pub enum Transfer {
    /// `memmove(dst, src, n)`; each side is checked as device or pinned host
    /// memory unless its `_host` flag says it is the application's pageable
    /// memory (whose caller waits for the copy).
    Copy {
        dst: u64,
        src: u64,
        n: usize,
        dst_host: bool,
        src_host: bool,
    },
    /// Pageable host data, staged at the call so the caller may reuse its
    /// buffer at once, as the driver does.
    Write {
        dst: u64,
        data: Box<[u8]>,
    },
    Fill8 {
        dst: u64,
        value: u8,
        n: usize,
    },
    Fill32 {
        dst: u64,
        value: u32,
        n: usize,
    },
}

pub enum Op {
    Kernel {
        stream: Arc<Stream>,
        remaining_ns: u64,
    },
    Record {
        stream: Arc<Stream>,
        event: Arc<Event>,
        generation: u64,
    },
    /// `cuMemFreeAsync`: `token` names a pool block that went back to its
    /// pool at the call (see [`crate::pool`]); 0, memory freed now.
    Free {
        stream: Arc<Stream>,
        ptr: u64,
        token: u64,
    },
    Host {
        stream: Arc<Stream>,
        call: HostCall,
    },
    Transfer {
        stream: Arc<Stream>,
        transfer: Transfer,
    },
    /// Waits until `event`'s record number `generation`, queued on
    /// `recorder`, has completed. `None`: the record is earlier in this
    /// queue, so reaching the op is enough; the op still counts on its
    /// stream, so synchronising the stream waits for the record.
    Wait {
        stream: Arc<Stream>,
        event: Arc<Event>,
        generation: u64,
        recorder: Option<Arc<Executor>>,
    },
}

impl Op {
    fn stream(&self) -> &Arc<Stream> {
        match self {
            Op::Kernel { stream, .. }
            | Op::Record { stream, .. }
            | Op::Free { stream, .. }
            | Op::Host { stream, .. }
            | Op::Wait { stream, .. }
            | Op::Transfer { stream, .. } => stream,
        }
    }

    /// Ops that must run alone, in real time, with nothing after them started.
    fn is_barrier(&self) -> bool {
        matches!(self, Op::Host { .. } | Op::Wait { recorder: Some(_), .. })
    }
}

struct Queue {
    /// Each op with the time it was submitted ([`sys::now_ns`]).
    ops: VecDeque<(Op, u64)>,
    worker_sleeping: bool,
    /// Threads waiting on `done` (synchronisers and blocked launchers).
    waiters: u32,
    /// Threads waiting on `laid` (for an event's record).
    record_waiters: u32,
    submitted: u64,
    completed: u64,
    shutdown: bool,
}

/// One context's queue and worker.
pub struct Executor {
    pub device: usize,
    pub ctx: u64,
    queue: Mutex<Queue>,
    work: Condvar,
    done: Condvar,
    /// Signalled when records are laid out or published, for threads
    /// waiting for one ([`Executor::wait_for_record`]); apart from `done`,
    /// so that laying out wakes no other waiter.
    laid: Condvar,
}

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the worker needs from the rest of the driver.
pub trait Host: Send + Sync + 'static {
    fn state(&self) -> &crate::state::SharedState;
    fn own_slot(&self) -> usize;
    fn slice_ns(&self) -> u64;
    /// Performs a stream-ordered free (see [`Op::Free`]).
    fn free_async(&self, ptr: u64, token: u64);
    /// Performs a stream-ordered copy or fill.
    fn transfer(&self, transfer: &Transfer);
}

impl Executor {
    pub fn start(device: usize, ctx: u64, host: &'static dyn Host) -> std::io::Result<Arc<Executor>> {
        let exec = Arc::new(Executor {
            device,
            ctx,
            queue: Mutex::new(Queue {
                ops: VecDeque::new(),
                worker_sleeping: false,
                waiters: 0,
                record_waiters: 0,
                submitted: 0,
                completed: 0,
                shutdown: false,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            laid: Condvar::new(),
        });
        let worker = exec.clone();
        std::thread::Builder::new().name(format!("simgpu-ctx{device}")).spawn(move || worker.run(host))?;
        Ok(exec)
    }

    /// Queues an op; blocks while the queue is full.
    pub fn submit(&self, op: Op) {
        let mut q = lock(&self.queue);
        while q.ops.len() >= MAX_PENDING && !q.shutdown {
            q.waiters += 1;
            q = self.done.wait(q).unwrap_or_else(|p| p.into_inner());
            q.waiters -= 1;
        }
        op.stream().submitted.fetch_add(1, Release);
        q.submitted += 1;
        q.ops.push_back((op, sys::now_ns()));
        if q.worker_sleeping {
            q.worker_sleeping = false;
            self.work.notify_one();
        }
    }

    /// Runs `complete` with the time now, under the queue's lock, where this
    /// context has nothing queued, running or left to publish; returns
    /// whether it did. A record on an idle device completes as the device
    /// takes it in (a real GPU's front end: well under a microsecond), not
    /// when this worker next wakes, which on a loaded host is tens of
    /// microseconds for the wake-up call alone. Nothing can be queued
    /// before it meanwhile: submissions take the same lock.
    pub fn complete_if_idle(&self, complete: impl FnOnce(u64)) -> bool {
        let q = lock(&self.queue);
        if q.shutdown || !q.ops.is_empty() || q.completed != q.submitted {
            return false;
        }
        complete(sys::now_ns());
        // A wait for the event (another context's, or a synchronisation
        // that began between the record's start and here) sleeps on `done`
        // or `laid`.
        self.notify_completions(&q);
        true
    }

    /// Waits until everything submitted so far has completed.
    pub fn synchronize(&self) {
        let mut q = lock(&self.queue);
        let target = q.submitted;
        while q.completed < target && !q.shutdown {
            q.waiters += 1;
            q = self.done.wait(q).unwrap_or_else(|p| p.into_inner());
            q.waiters -= 1;
        }
    }

    /// Waits until the latest record of `e` on this context has completed
    /// ([`Event::completed_at`]): until its time, once the worker has laid
    /// it out.
    pub fn wait_for_record(&self, e: &Event) {
        let mut q = lock(&self.queue);
        while e.completed_at().is_none() && !q.shutdown {
            let now_ns = sys::now_ns();
            q.record_waiters += 1;
            q = match e.due_at() {
                Some(due_ns) if due_ns > now_ns => {
                    let wait = std::time::Duration::from_nanos(due_ns - now_ns);
                    self.laid.wait_timeout(q, wait).map(|(q, _)| q).unwrap_or_else(|p| p.into_inner().0)
                }
                Some(_) => q,
                None => self.laid.wait(q).unwrap_or_else(|p| p.into_inner()),
            };
            q.record_waiters -= 1;
        }
    }

    /// Wakes the threads waiting for completions (call with the queue's lock
    /// held, after publishing).
    fn notify_completions(&self, q: &Queue) {
        if q.waiters > 0 {
            self.done.notify_all();
        }
        if q.record_waiters > 0 {
            self.laid.notify_all();
        }
    }

    /// Waits until `cond` holds (checked under the queue lock after each
    /// completion batch).
    pub fn wait_until(&self, cond: impl Fn() -> bool) {
        let mut q = lock(&self.queue);
        while !cond() && !q.shutdown {
            q.waiters += 1;
            q = self.done.wait(q).unwrap_or_else(|p| p.into_inner());
            q.waiters -= 1;
        }
    }

    pub fn idle(&self) -> bool {
        let q = lock(&self.queue);
        q.completed == q.submitted
    }

    /// Stops the worker after the queue drains.
    pub fn shutdown(&self) {
        self.synchronize();
        let mut q = lock(&self.queue);
        q.shutdown = true;
        self.work.notify_all();
        self.done.notify_all();
        self.laid.notify_all();
    }

    fn run(self: Arc<Self>, host: &'static dyn Host) {
        sys::set_small_timer_slack();
        ledger::sched::ask_for_short_slices(WORKER_SLICE);
        let sched = Scheduler { state: host.state(), device: self.device, own_slot: host.own_slot() };
        let slice_ns = host.slice_ns();
        let mut vclock_ns = 0u64;
        let mut held: Option<(u64, u64)> = None; // (ticket, slice start)
        let mut done: Vec<(Op, u64)> = Vec::new();
        loop {
            // Wait for work, giving the device back while idle.
            let head_is_kernel = {
                let mut q = lock(&self.queue);
                while q.ops.is_empty() {
                    if q.shutdown {
                        drop(q);
                        if let Some((t, _)) = held.take() {
                            sched.release(t);
                        }
                        return;
                    }
                    if let Some((t, _)) = held.take() {
                        drop(q);
                        sched.release(t);
                        q = lock(&self.queue);
                        continue;
                    }
                    q.worker_sleeping = true;
                    q = self.work.wait(q).unwrap_or_else(|p| p.into_inner());
                }
                matches!(q.ops.front(), Some((Op::Kernel { .. }, _)))
            };
            if let Some((t, _)) = held {
                if !sched.still_serving(t) {
                    // Skipped while this process was stopped: queue again,
                    // after what the device ran meanwhile.
                    held = None;
                }
            }
            if head_is_kernel && held.is_none() {
                let t = sched.acquire();
                let now = sys::now_ns();
                held = Some((t, now));
                vclock_ns = vclock_ns.max(sched.free_at_ns(now));
            }
            let now = sys::now_ns();
            vclock_ns = vclock_ns.max(now.saturating_sub(MAX_CATCH_UP_NS));
            let horizon = match held {
                Some((_, start)) => (start + slice_ns).min(now + BATCH_HORIZON_NS).max(now),
                None => now,
            };
            let mut busy_ns = 0u64;
            let mut barrier: Option<Op> = None;
            {
                let mut q = lock(&self.queue);
                // A copy or free in the batch happens when it is published:
                // a record behind one is not complete before that.
                let mut behind_effect = false;
                let mut records_due = false;
                while done.len() < BATCH_MAX_OPS {
                    let Some((front, submitted_ns)) = q.ops.front_mut() else { break };
                    let starts_ns = vclock_ns.max(*submitted_ns);
                    if front.is_barrier() {
                        if done.is_empty() {
                            barrier = q.ops.pop_front().map(|(op, _)| op);
                        }
                        break;
                    }
                    match front {
                        Op::Kernel { remaining_ns, .. } => {
                            if held.is_none() {
                                break;
                            }
                            vclock_ns = starts_ns;
                            let room = horizon.saturating_sub(vclock_ns);
                            if *remaining_ns > room {
                                if room > 0 {
                                    *remaining_ns -= room;
                                    vclock_ns += room;
                                    busy_ns += room;
                                }
                                break;
                            }
                            vclock_ns += *remaining_ns;
                            busy_ns += *remaining_ns;
                        }
                        Op::Record { event, generation, .. } => {
                            vclock_ns = starts_ns;
                            if !behind_effect {
                                event.due_ns.store(vclock_ns, Release);
                                event.due_generation.store(*generation, Release);
                                records_due = true;
                            }
                        }
                        Op::Free { .. } | Op::Transfer { .. } => {
                            vclock_ns = starts_ns;
                            behind_effect = true;
                        }
                        Op::Host { .. } | Op::Wait { .. } => {
                            vclock_ns = starts_ns;
                        }
                    }
                    if let Some((op, _)) = q.ops.pop_front() {
                        done.push((op, vclock_ns));
                    }
                }
                // A thread waiting for one of those records sleeps until its
                // time rather than until the batch's end.
                if records_due && q.record_waiters > 0 {
                    self.laid.notify_all();
                }
            }
            if held.is_some() {
                sched.hold_until_ns(vclock_ns, now);
            }
            if vclock_ns > sys::now_ns() {
                sys::sleep_until_ns(vclock_ns);
            }
            if let Some(op) = barrier {
                // The device is not ours while the application's function
                // runs or another context's work is awaited.
                if let Some((t, _)) = held.take() {
                    sched.release(t);
                }
                match &op {
                    Op::Host { call, .. } => call.call(),
                    Op::Wait { event, generation, recorder: Some(recorder), .. } => {
                        recorder.wait_until(|| event.done_generation.load(Acquire) >= *generation)
                    }
                    _ => {}
                }
                done.push((op, sys::now_ns()));
                vclock_ns = vclock_ns.max(sys::now_ns());
            }
            let completed = done.len() as u64;
            for (op, at_ns) in done.drain(..) {
                match &op {
                    Op::Record { event, generation, .. } => {
                        if event.generation.load(Acquire) == *generation {
                            event.time_ns.store(at_ns, Release);
                            event.complete.store(true, Release);
                        }
                        event.done_generation.fetch_max(*generation, AcqRel);
                    }
                    Op::Free { ptr, token, .. } => host.free_async(*ptr, *token),
                    Op::Transfer { transfer, .. } => host.transfer(transfer),
                    Op::Kernel { .. } | Op::Host { .. } | Op::Wait { .. } => {}
                }
                op.stream().completed.fetch_add(1, Release);
            }
            if busy_ns > 0 {
                let st = host.state();
                st.device(self.device).busy_ns_total.fetch_add(busy_ns, AcqRel);
                st.proc(host.own_slot()).devices[self.device].busy_ns_total.fetch_add(busy_ns, AcqRel);
                let now = sys::now_ns();
                st.sample_device(self.device, now);
                crate::nvml::sample_process(st, host.own_slot(), self.device, now);
            }
            if completed > 0 {
                let mut q = lock(&self.queue);
                q.completed += completed;
                self.notify_completions(&q);
            }
            if let Some((t, start)) = held {
                let now = sys::now_ns();
                if !sched.still_serving(t) {
                    // Skipped while this process was stopped: queue again.
                    held = None;
                } else if now >= start + slice_ns {
                    if sched.others_waiting(t) {
                        sched.release(t);
                        held = None;
                    } else {
                        held = Some((t, now));
                    }
                }
            }
        }
    }
}
