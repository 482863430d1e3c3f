//! The process-wide driver: the simulated machine (config + shared state),
//! this process's record in it, and the registry of every handle issued.
//!
//! Handles given to the application are opaque numbers (a kind tag in the high
//! bits, a counter below), never pointers into simgpu's memory: every call
//! looks its handles up in the registry, so a stale, foreign or garbage handle
//! is an error code, never a dereference.

use crate::config::Config;
use crate::exec::{lock, Event, Executor, Host, Stream};
use crate::memory::{DeviceHeap, VmmState};
use crate::state::SharedState;
use abi::cuda::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub type CuResult<T> = Result<T, CUresult>;

/// The simulated machine as this process sees it; shared by driver and NVML.
pub struct Machine {
    pub config: Config,
    pub state: SharedState,
    /// What each slot of the state file is: devices, then MIG instances.
    pub topology: crate::mig::Topology,
}

static MACHINE: OnceLock<Result<Machine, String>> = OnceLock::new();

/// Opens the machine once; on a configuration or state-file error, prints the
/// message to stderr (once) and returns it.
pub fn machine() -> Result<&'static Machine, &'static str> {
    let m = MACHINE.get_or_init(|| {
        let r = Config::from_env().map_err(|e| e.to_string()).and_then(|config| {
            let state = SharedState::open(&config).map_err(|e| e.to_string())?;
            let topology = config.topology();
            Ok(Machine { config, state, topology })
        });
        if let Err(msg) = &r {
            eprintln!("{msg}");
        }
        r
    });
    m.as_ref().map_err(|s| s.as_str())
}

pub const TAG_CTX: u64 = 0x5c;
pub const TAG_MODULE: u64 = 0x5d;
pub const TAG_FUNC: u64 = 0x5f;
pub const TAG_STREAM: u64 = 0x51;
pub const TAG_EVENT: u64 = 0x5e;
pub const TAG_POOL: u64 = 0x50;
pub const TAG_GRAPH: u64 = 0x6a;
pub const TAG_NODE: u64 = 0x6b;
pub const TAG_EXEC: u64 = 0x6c;
pub const TAG_ARRAY: u64 = 0x6d;
pub const TAG_MIPMAP: u64 = 0x6e;
pub const TAG_VMM: u64 = 0x6f;
pub const TAG_USER_OBJECT: u64 = 0x70;

pub struct Context {
    pub handle: u64,
    /// Unique for the process's lifetime (`cuCtxGetId`), where a primary
    /// context's handle is the same after a reset.
    pub id: u64,
    pub device: usize,
    pub primary: bool,
    pub flags: u32,
    pub charged_bytes: u64,
    pub exec: Arc<Executor>,
    pub default_stream: Arc<Stream>,
    /// Limits, cache preference and peer access, as set on this context.
    pub settings: ContextSettings,
}

/// What a context keeps that the application sets: its `CUlimit` values
/// (by enum value), its cache preference and the peer contexts it may
/// access ([`crate::exports::peer`]).
pub struct ContextSettings {
    pub limits: [AtomicU64; LIMIT_COUNT],
    pub cache_config: AtomicU32,
    pub shared_mem_config: AtomicU32,
    pub peers: Mutex<Vec<u64>>,
}

/// `CU_LIMIT_STACK_SIZE` … `CU_LIMIT_PER_BLOCK_MEMORY_SIZE`.
pub const LIMIT_COUNT: usize = 11;

/// The limits a new context has on a data-centre GPU (cuda.h documents
/// each; the values are what a driver reports for a fresh context): 1 KiB
/// stack per thread, 1 MiB printf FIFO, 8 MiB device heap, sync depth 2,
/// 2048 pending launches, 64-byte L2 fetch granularity, no persisting L2,
/// the multiprocessor's shared memory, CIG off, and per-block memory.
pub const LIMIT_DEFAULTS: [u64; LIMIT_COUNT] = [1024, 1 << 20, 8 << 20, 2, 2048, 64, 0, 233_472, 0, 0, 0];

impl Default for ContextSettings {
    fn default() -> Self {
        ContextSettings {
            limits: LIMIT_DEFAULTS.map(AtomicU64::new),
            cache_config: AtomicU32::new(0),
            shared_mem_config: AtomicU32::new(0),
            peers: Mutex::new(Vec::new()),
        }
    }
}

/// A module, or (with `ctx` 0) a context-independent library.
pub struct Module {
    pub ctx: u64,
    pub functions: HashMap<String, u64>,
    /// The kernels its image defines ([`crate::image`]).
    pub kernels: crate::image::Kernels,
    /// Its device variables and their sizes in bytes.
    pub globals: std::collections::BTreeMap<String, u64>,
    /// Device memory given to a variable, made on first request.
    pub global_ptrs: HashMap<String, u64>,
}

pub struct Function {
    pub module: u64,
    pub name: String,
    /// The name as `cuFuncGetName` hands it out.
    pub c_name: std::ffi::CString,
    /// `sim_*`: runs for its first argument in microseconds.
    pub sim: bool,
    /// The attributes `cuFuncSetAttribute` may change, as last set.
    pub settable: FunctionSettings,
}

/// A function's settable attributes (`CU_FUNC_ATTRIBUTE_*`), each kept as
/// the driver keeps it: what was set, or the default of a kernel that
/// declares nothing.
pub struct FunctionSettings {
    /// `MAX_DYNAMIC_SHARED_SIZE_BYTES`: 48 KiB until raised.
    pub max_dynamic_shared_bytes: AtomicI32,
    /// `PREFERRED_SHARED_MEMORY_CARVEOUT`: -1, no preference.
    pub carveout_percent: AtomicI32,
    /// `REQUIRED_CLUSTER_WIDTH/HEIGHT/DEPTH`: 0, none required.
    pub cluster_dims: [AtomicI32; 3],
    /// `NON_PORTABLE_CLUSTER_SIZE_ALLOWED`.
    pub non_portable_cluster: AtomicI32,
    /// `CLUSTER_SCHEDULING_POLICY_PREFERENCE`.
    pub cluster_scheduling: AtomicI32,
}

impl Default for FunctionSettings {
    fn default() -> Self {
        FunctionSettings {
            max_dynamic_shared_bytes: AtomicI32::new(48 * 1024),
            carveout_percent: AtomicI32::new(-1),
            cluster_dims: [AtomicI32::new(0), AtomicI32::new(0), AtomicI32::new(0)],
            non_portable_cluster: AtomicI32::new(0),
            cluster_scheduling: AtomicI32::new(0),
        }
    }
}

/// A stream-ordered memory pool, kept as a real driver keeps one (see
/// [`crate::pool`]): freed blocks stay reserved on the device, charged to
/// this process, until they are reused, trimmed, or released above the
/// release threshold at a synchronisation.
pub struct Pool {
    pub device: usize,
    pub default: bool,
    pub handle_types: u32,
    pub release_threshold_bytes: AtomicU64,
    /// `CU_MEMPOOL_ATTR_REUSE_*` flags, by attribute - 1.
    pub reuse: [AtomicU32; 3],
    pub blocks: Mutex<crate::pool::PoolBlocks>,
    /// Allocates managed memory (`CU_MEM_ALLOCATION_TYPE_MANAGED`).
    pub managed: bool,
}

impl Pool {
    pub fn new(device: usize, default: bool, handle_types: u32) -> Pool {
        Pool {
            managed: false,
            device,
            default,
            handle_types,
            release_threshold_bytes: AtomicU64::new(0),
            reuse: [AtomicU32::new(1), AtomicU32::new(1), AtomicU32::new(1)],
            blocks: Mutex::new(crate::pool::PoolBlocks::default()),
        }
    }
}

pub struct ArrayRec {
    pub device: usize,
    pub ctx: u64,
    pub charged_bytes: u64,
}

/// A graph node: a kernel launch (`func` non-zero) with its simulated run
/// time and launch shape, or an empty node (`func` 0), which only orders.
pub struct KernelNode {
    pub duration_ns: u64,
    pub func: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
}

impl KernelNode {
    pub fn empty() -> KernelNode {
        KernelNode { duration_ns: 0, func: 0, grid: [0; 3], block: [0; 3], shared_bytes: 0 }
    }
}

#[derive(Default)]
pub struct Graph {
    /// Node handles in insertion order (a valid topological order: a node's
    /// dependencies must exist before it is added).
    pub nodes: Vec<u64>,
    /// References to user objects the graph owns, by object.
    pub user_refs: HashMap<u64, u64>,
}

/// A user object (`cuUserObjectCreate`): its destructor runs, on a thread
/// of the driver's, when the last reference goes.
pub struct UserObject {
    pub data: usize,
    pub destroy: unsafe extern "C" fn(*mut std::ffi::c_void),
    pub refs: u64,
}

pub struct GraphExec {
    /// The graph's nodes at instantiation, in launch order, and each one's
    /// simulated run time (0 for an empty node); `cuGraphExecKernelNodeSetParams`
    /// may change a kernel's.
    pub nodes: Vec<u64>,
    pub kernels_ns: Mutex<Vec<u64>>,
    /// `CUgraphInstantiate_flags` it was made with.
    pub flags: u64,
    /// References to user objects copied from its graph at instantiation.
    pub user_refs: HashMap<u64, u64>,
}

#[derive(Default)]
pub struct Objects {
    pub contexts: HashMap<u64, Arc<Context>>,
    pub modules: HashMap<u64, Module>,
    pub functions: HashMap<u64, Arc<Function>>,
    pub streams: HashMap<u64, Arc<Stream>>,
    pub events: HashMap<u64, Arc<Event>>,
    pub pools: HashMap<u64, Pool>,
    pub arrays: HashMap<u64, ArrayRec>,
    pub mipmaps: HashMap<u64, ArrayRec>,
    pub graphs: HashMap<u64, Graph>,
    pub nodes: HashMap<u64, (u64, KernelNode)>,
    pub execs: HashMap<u64, Arc<GraphExec>>,
    pub user_objects: HashMap<u64, UserObject>,
    pub host_allocs: HashMap<u64, usize>,
}

pub struct Primary {
    pub ctx: Option<u64>,
    pub refs: u32,
    pub flags: u32,
}

pub struct DeviceRt {
    pub heap: OnceLock<Result<DeviceHeap, CUresult>>,
    pub primary: Mutex<Primary>,
    /// The primary context's handle: fixed for the device, whether the
    /// context is active or not, as a driver keeps it (the runtime asks for
    /// it before retaining, through its export table).
    pub primary_handle: u64,
    pub default_pool: u64,
    /// The device's default pool of managed memory (`cuMemGetDefaultMemPool`
    /// with `CU_MEM_ALLOCATION_TYPE_MANAGED`).
    pub managed_pool: u64,
}

pub struct Driver {
    pub machine: &'static Machine,
    own_slot: AtomicUsize,
    /// Every slot (physical device or MIG instance), by slot index.
    pub devices: Vec<DeviceRt>,
    /// Slot of each ordinal the application sees (`CUDA_VISIBLE_DEVICES`
    /// and MIG, see [`crate::visible`]).
    pub visible: Vec<usize>,
    pub objects: RwLock<Objects>,
    pub vmm: Mutex<VmmState>,
    next_id: AtomicU64,
}

static DRIVER: OnceLock<Result<Driver, CUresult>> = OnceLock::new();

/// The initialised driver, or `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`.
/// A `cuInit` that found no visible device (`CUDA_VISIBLE_DEVICES` empty or
/// naming none) returned `CUDA_ERROR_NO_DEVICE` but leaves a driver with no
/// ordinals, so `cuDeviceGetCount` reports 0 and `cuDeviceGet` an invalid
/// device.
#[inline]
pub fn driver() -> CuResult<&'static Driver> {
    match DRIVER.get() {
        Some(Ok(d)) => {
            if FORKED.load(Relaxed) {
                d.reinit_after_fork()?;
            }
            Ok(d)
        }
        _ => Err(CUDA_ERROR_NOT_INITIALIZED),
    }
}

/// Set in a child process right after fork(); the next driver call there
/// re-initialises the process's view (see [`Driver::reinit_after_fork`]).
static FORKED: AtomicBool = AtomicBool::new(false);
/// The pid whose process record `own_slot` is.
static OWNER_PID: AtomicU32 = AtomicU32::new(0);

extern "C" fn mark_forked() {
    FORKED.store(true, Release);
}

extern "C" fn release_at_exit() {
    if let Some(Ok(d)) = DRIVER.get() {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u32;
        // A forked child that never used the driver must not release its
        // parent's record.
        if OWNER_PID.load(Acquire) == pid {
            d.machine.state.release_proc(d.own_slot());
        }
    }
}

pub fn init(flags: u32) -> CuResult<()> {
    if flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let r = DRIVER.get_or_init(|| {
        let machine = machine().map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        let own_slot = machine.state.claim_proc(crate::sys::host_pid()).ok_or_else(|| {
            eprintln!(
                "simgpu: state file {} has no free process record (all {} in use)",
                machine.state.path.display(),
                crate::state::MAX_PROCS
            );
            CUDA_ERROR_OUT_OF_MEMORY
        })?;
        let mut objects = Objects::default();
        let mut devices = Vec::new();
        for i in 0..machine.topology.slot_count() {
            let pool = (TAG_POOL << 40) | (i as u64 + 1);
            objects.pools.insert(pool, Pool::new(i, true, 0));
            // Managed pools are numbered after every device's pool.
            let managed_pool = (TAG_POOL << 40) | (machine.topology.slot_count() as u64 + i as u64 + 1);
            objects.pools.insert(managed_pool, Pool { managed: true, ..Pool::new(i, true, 0) });
            let primary_handle = (TAG_CTX << 40) | (i as u64 + 1);
            devices.push(DeviceRt {
                heap: OnceLock::new(),
                primary: Mutex::new(Primary { ctx: None, refs: 0, flags: 0 }),
                primary_handle,
                default_pool: pool,
                managed_pool,
            });
        }
        // SAFETY: getpid has no preconditions.
        OWNER_PID.store(unsafe { libc::getpid() } as u32, Release);
        // SAFETY: registering plain extern "C" fns with no captured state.
        unsafe {
            libc::atexit(release_at_exit);
            libc::pthread_atfork(None, None, Some(mark_forked));
        }
        let visible = crate::visible::visible_slots(std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref(), &enumeration(machine));
        Ok(Driver {
            machine,
            own_slot: AtomicUsize::new(own_slot),
            devices,
            visible,
            objects: RwLock::new(objects),
            vmm: Mutex::new(VmmState::default()),
            next_id: AtomicU64::new(64),
        })
    });
    match r {
        Ok(d) if d.visible.is_empty() => Err(CUDA_ERROR_NO_DEVICE),
        Ok(_) => Ok(()),
        Err(e) => Err(*e),
    }
}

impl Host for Driver {
    fn state(&self) -> &SharedState {
        &self.machine.state
    }
    fn own_slot(&self) -> usize {
        self.own_slot.load(Relaxed)
    }
    fn slice_ns(&self) -> u64 {
        self.machine.config.slice_us * 1000
    }
    fn free_async(&self, ptr: u64, token: u64) {
        if token == 0 {
            let _ = crate::memory::free_device(self, ptr);
        } else {
            crate::pool::free_reached(self, token);
        }
    }
    fn transfer(&self, transfer: &crate::exec::Transfer) {
        crate::memory::run_transfer(self, transfer);
    }
}

thread_local! {
    static CTX_STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

pub fn current_ctx_handle() -> Option<u64> {
    CTX_STACK.try_with(|s| s.borrow().last().copied()).ok().flatten()
}

pub fn with_ctx_stack<R>(f: impl FnOnce(&mut Vec<u64>) -> R) -> CuResult<R> {
    CTX_STACK.try_with(|s| f(&mut s.borrow_mut())).map_err(|_| CUDA_ERROR_UNKNOWN)
}

impl Driver {
    pub fn own_slot(&self) -> usize {
        self.own_slot.load(Relaxed)
    }

    /// In a forked child: the parent's contexts, streams and allocations do
    /// not exist here (no worker threads, charges belong to the parent's
    /// record). Claim a record of our own through our own open file
    /// description and start from an empty registry; the parent's address
    /// ranges stay reserved in our copy of the heaps so they are never reused.
    fn reinit_after_fork(&self) -> CuResult<()> {
        static REINIT: Mutex<()> = Mutex::new(());
        let _g = lock(&REINIT);
        if !FORKED.load(Acquire) {
            return Ok(());
        }
        let st = &self.machine.state;
        if !st.reopen_after_fork() {
            return Err(CUDA_ERROR_NOT_INITIALIZED);
        }
        let slot = st.claim_proc(crate::sys::host_pid()).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        self.own_slot.store(slot, Release);
        // SAFETY: getpid has no preconditions.
        OWNER_PID.store(unsafe { libc::getpid() } as u32, Release);
        {
            let mut o = self.write();
            let pools: Vec<(u64, Pool)> = o
                .pools
                .drain()
                .filter(|(_, p)| p.default)
                .map(|(h, p)| (h, Pool { managed: p.managed, ..Pool::new(p.device, true, 0) }))
                .collect();
            *o = Objects::default();
            o.pools.extend(pools);
        }
        for rt in &self.devices {
            let mut p = lock(&rt.primary);
            p.ctx = None;
            p.refs = 0;
            if let Some(Ok(h)) = rt.heap.get() {
                lock(&h.inner).blocks.clear();
            }
        }
        *lock(&self.vmm) = VmmState::default();
        let _ = with_ctx_stack(|s| s.clear());
        FORKED.store(false, Release);
        Ok(())
    }

    pub fn read(&self) -> RwLockReadGuard<'_, Objects> {
        self.objects.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, Objects> {
        self.objects.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn new_handle(&self, tag: u64) -> u64 {
        (tag << 40) | self.next_id.fetch_add(1, Relaxed)
    }

    /// Devices the application sees (after `CUDA_VISIBLE_DEVICES`).
    pub fn device_count(&self) -> usize {
        self.visible.len()
    }

    /// The physical index of an ordinal the application passed.
    pub fn check_device(&self, dev: CUdevice) -> CuResult<usize> {
        usize::try_from(dev).ok().and_then(|o| self.visible.get(o).copied()).ok_or(CUDA_ERROR_INVALID_DEVICE)
    }

    /// The ordinal the application knows a physical device by. Every device
    /// with a context is visible, so the fallback is never used in practice.
    pub fn ordinal_of(&self, physical: usize) -> CUdevice {
        self.visible.iter().position(|&p| p == physical).map_or(-1, |o| o as CUdevice)
    }

    /// The current context, or `CUDA_ERROR_INVALID_CONTEXT`.
    pub fn current(&self) -> CuResult<Arc<Context>> {
        let h = current_ctx_handle().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        self.read().contexts.get(&h).cloned().ok_or(CUDA_ERROR_INVALID_CONTEXT)
    }

    pub fn context(&self, handle: u64) -> CuResult<Arc<Context>> {
        if handle == 0 {
            return self.current();
        }
        self.read().contexts.get(&handle).cloned().ok_or(CUDA_ERROR_INVALID_CONTEXT)
    }

    /// Resolves a stream argument: null, `CU_STREAM_LEGACY` and
    /// `CU_STREAM_PER_THREAD` mean the current context's default stream.
    pub fn stream(&self, handle: u64) -> CuResult<(Arc<Context>, Arc<Stream>)> {
        if handle <= 2 {
            let ctx = self.current()?;
            let s = ctx.default_stream.clone();
            return Ok((ctx, s));
        }
        let objs = self.read();
        let s = objs.streams.get(&handle).cloned().ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let ctx = objs.contexts.get(&s.ctx).cloned().ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        Ok((ctx, s))
    }

    /// Creates a context on `device`, charging its memory.
    pub fn create_context(&'static self, device: usize, primary: bool, flags: u32) -> CuResult<Arc<Context>> {
        let st = &self.machine.state;
        // Context creation is one of the moments a dead process's memory is
        // given back (besides a failing charge and NVML queries).
        st.reclaim_dead(None);
        let bytes = self.machine.config.context_memory_bytes;
        if bytes > 0 && !st.charge(device, self.own_slot(), bytes) {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let handle = if primary { self.devices[device].primary_handle } else { self.new_handle(TAG_CTX) };
        let exec = match Executor::start(device, handle, self) {
            Ok(e) => e,
            Err(_) => {
                st.uncharge(device, self.own_slot(), bytes);
                return Err(CUDA_ERROR_OUT_OF_MEMORY);
            }
        };
        let default_stream = Arc::new(Stream::new(self.new_handle(TAG_STREAM), handle, 0, 0));
        let id = self.next_id.fetch_add(1, Relaxed);
        let ctx = Arc::new(Context {
            handle,
            id,
            device,
            primary,
            flags,
            charged_bytes: bytes,
            exec,
            default_stream,
            settings: ContextSettings::default(),
        });
        st.proc(self.own_slot()).devices[device].contexts.fetch_add(1, AcqRel);
        self.write().contexts.insert(handle, ctx.clone());
        Ok(ctx)
    }

    /// Destroys a context: waits for its work, frees everything it owns and
    /// gives its memory back.
    pub fn destroy_context(&self, handle: u64) -> CuResult<()> {
        // The runtime's per-context state goes first, while the context
        // still exists for its destructors to use.
        crate::exports::export_table::context_destroyed(handle);
        let ctx = self.write().contexts.remove(&handle).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        ctx.exec.shutdown();
        crate::memory::free_all_of_context(self, &ctx);
        {
            let mut o = self.write();
            let mods: Vec<u64> = o.modules.iter().filter(|(_, m)| m.ctx == handle).map(|(h, _)| *h).collect();
            for m in mods {
                if let Some(module) = o.modules.remove(&m) {
                    for f in module.functions.values() {
                        o.functions.remove(f);
                    }
                }
            }
            o.streams.retain(|_, s| s.ctx != handle);
        }
        let st = &self.machine.state;
        st.uncharge(ctx.device, self.own_slot(), ctx.charged_bytes);
        let pd = &st.proc(self.own_slot()).devices[ctx.device];
        let _ = pd.contexts.fetch_update(AcqRel, Relaxed, |c| Some(c.saturating_sub(1)));
        let _ = with_ctx_stack(|s| s.retain(|&c| c != handle));
        Ok(())
    }

    pub fn primary_retain(&'static self, device: usize) -> CuResult<u64> {
        let mut p = lock(&self.devices[device].primary);
        if let Some(h) = p.ctx {
            p.refs += 1;
            return Ok(h);
        }
        let ctx = self.create_context(device, true, p.flags)?;
        p.ctx = Some(ctx.handle);
        p.refs = 1;
        Ok(ctx.handle)
    }

    pub fn primary_release(&self, device: usize) -> CuResult<()> {
        let mut p = lock(&self.devices[device].primary);
        if p.refs == 0 {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        p.refs -= 1;
        if p.refs == 0 {
            if let Some(h) = p.ctx.take() {
                drop(p);
                self.destroy_context(h)?;
            }
        }
        Ok(())
    }

    pub fn primary_reset(&self, device: usize) -> CuResult<()> {
        let mut p = lock(&self.devices[device].primary);
        p.refs = 0;
        if let Some(h) = p.ctx.take() {
            drop(p);
            self.destroy_context(h)?;
        }
        Ok(())
    }
}

/// The physical devices as `CUDA_VISIBLE_DEVICES` resolves them.
fn enumeration(machine: &Machine) -> Vec<crate::visible::Physical> {
    let t = &machine.topology;
    (0..machine.state.device_count() as usize)
        .map(|d| crate::visible::Physical {
            slot: d,
            uuid: slot_uuid_string(machine, d),
            instances: t
                .instance_slots(d)
                .into_iter()
                .filter_map(|slot| {
                    let i = t.instance(slot)?;
                    Some(crate::visible::MigUnit {
                        slot,
                        uuid: slot_uuid_string(machine, slot),
                        gpu_instance_id: i.gpu_instance_id(),
                        compute_instance_id: i.compute_instance_id(),
                    })
                })
                .collect(),
        })
        .collect()
}

/// The UUID bytes of a slot: a device's, or a MIG instance's (a version 5
/// UUID, as the driver gives MIG devices).
pub fn slot_uuid(machine: &Machine, slot: usize) -> [u8; 16] {
    let mut u = device_uuid(&machine.state, slot);
    if machine.topology.instance(slot).is_some() {
        u[6] = (u[6] & 0x0f) | 0x50;
    }
    u
}

/// `GPU-…` for a device, `MIG-…` for a MIG instance, as NVML and
/// `nvidia-smi -L` print them.
pub fn slot_uuid_string(machine: &Machine, slot: usize) -> String {
    let kind = match machine.topology.instance(slot) {
        Some(_) => abi::uuid::UuidKind::Mig,
        None => abi::uuid::UuidKind::Gpu,
    };
    abi::uuid::UuidText { kind, bytes: slot_uuid(machine, slot) }.to_string()
}

/// The name a slot reports: `simgpu H200`, or `simgpu H200 MIG 3g.71gb`
/// for an instance (the driver names MIG devices `NVIDIA H200 MIG 1g.18gb`).
pub fn slot_name(machine: &Machine, slot: usize) -> String {
    match machine.topology.instance(slot) {
        Some(i) => format!("{DEVICE_NAME} MIG {}", i.profile.name),
        None => DEVICE_NAME.to_string(),
    }
}

/// Device UUID bytes: derived from the state file's random identity and the
/// device index, so it is stable for as long as the simulated machine exists
/// and identical in every process that shares it.
pub fn device_uuid(state: &SharedState, index: usize) -> [u8; 16] {
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let [a, b] = state.instance_id();
    let hi = mix(a ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let lo = mix(b ^ hi);
    let mut u = [0u8; 16];
    u[..8].copy_from_slice(&hi.to_be_bytes());
    u[8..].copy_from_slice(&lo.to_be_bytes());
    u[6] = (u[6] & 0x0f) | 0x40; // version 4
    u[8] = (u[8] & 0x3f) | 0x80; // RFC 4122 variant
    u
}

pub const DEVICE_NAME: &str = "simgpu H200";
pub const DRIVER_VERSION: i32 = 13000;
pub const NVML_DRIVER_VERSION: &str = "580.65.06";

/// PCI bus id of a device, `0000:BB:00.0`.
pub fn pci_bus_id(index: usize) -> String {
    format!("0000:{:02x}:00.0", 0x18 + index)
}
