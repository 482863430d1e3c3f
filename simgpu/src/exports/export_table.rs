//! `cuGetExportTable`: the private tables the CUDA runtime asks the driver
//! for, by GUID, right after `cuDriverGetVersion`. Without them libcudart
//! (and so CuPy, cuda.core's runtime calls, PyTorch) fails every call with
//! `cudaErrorNotSupported`.
//!
//! The tables are undocumented by NVIDIA. Their GUIDs, sizes and the meaning
//! of the slots used here are what public reimplementations of the driver
//! observed; this file serves them for a device that runs no code. Checked
//! against libcudart 13.5 (the `nvidia-cuda-runtime==13.5.37` wheel that
//! `scripts/setup.sh` installs) and the 13.0 runtime CuPy 14.2 links in;
//! `tests/frameworks.rs` runs both.
//!
//! A table is an array of pointer-sized words. Most start with their own
//! size in bytes; the context-local-storage one does not. Each slot simgpu
//! does not know the meaning of holds a function that logs the call and
//! returns `CUDA_ERROR_NOT_SUPPORTED` (calling it with more arguments is
//! harmless in the C calling convention), so an unexpected call is an error
//! code the runtime reports, never a jump to null. A GUID simgpu does not
//! serve is answered `CUDA_ERROR_INVALID_VALUE` with a null table, as the
//! driver answers an unknown one. Every request is logged at debug level
//! (`SIMGPU_LOG=debug`).
//!
//! | table | served as |
//! |---|---|
//! | runtime interface | module from a registered fatbin (three forms), the primary context's handle without activating it, "load the compilers" (nothing to load) |
//! | context-local storage | the runtime's per-context state: put / get / delete, and its destructors run when the context is destroyed |
//! | tools callback hooks | zeroed buffers: no tools are attached |
//! | tools TLS | the current context (slot 2, as `cuCtxGetCurrent`) |
//! | tools context | a context's id (slot 4, as `cuCtxGetId`; libcudart 13 fails to start without this table); the stream a library's stream argument names (slot 51) and that stream's id (slot 39, as `cuStreamGetId`), which cuBLAS keys its per-stream workspaces by |
//! | context-create bypass | creates a context as `cuCtxCreate_v2` does |
//! | integrity check | the keyed digest the runtime verifies (HMAC over MD2 of the process, the tables and the devices) |
//! | context checks | "nothing unusual" |
//! | device extended | slot 13, a per-device byte drivers answer 0; other slots not supported |
//! | heap access | not supported |
//! | library services (`1734DC26…`, asked for by cuBLASLt) | not supported |
//! | module functions (`6E163FBE…`, asked for by cuFFT) | each kernel of a module, visited (slot 7) |
//! | CUPTI (`7CB63F9B…`, asked for by libcupti; in [`super::cupti`]) | a table that exists (all `cuptiGetVersion` needs); each slot not supported |
//!
//! Not served: `F8CFF951…`, which libcudart 13.5 asks for first, and
//! `DA9151D3…`, which cuda-bindings asks for (both go on without them), and
//! Windows' hybrid-runtime table.

use crate::driver::{driver, CuResult};
use crate::exports::{h, module, ptr};
use crate::ffi::{guard, out};
use crate::log::simgpu_debug;
use abi::cuda::*;
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::Mutex;

/// A table as the runtime reads it: words that are function addresses or
/// (slot 0 of most tables) the table's size in bytes.
#[repr(transparent)]
pub struct Table<const N: usize>([*const c_void; N]);

// SAFETY: the words are immutable addresses of functions and constants.
unsafe impl<const N: usize> Sync for Table<N> {}

impl<const N: usize> Table<N> {
    fn start(&'static self) -> *const c_void {
        self.0.as_ptr().cast()
    }
}

/// Slot 0 of a table that starts with its size.
const fn size_word<const N: usize>() -> *const c_void {
    (N * std::mem::size_of::<usize>()) as *const c_void
}

/// A slot whose meaning simgpu does not know: logs, and answers "not supported".
extern "C" fn unknown_slot<const TABLE: usize, const SLOT: usize>() -> CUresult {
    simgpu_debug!("export table {} slot {SLOT} called: not supported", TABLES[TABLE].0);
    CUDA_ERROR_NOT_SUPPORTED
}

macro_rules! unknown {
    ($table:expr, $slot:literal) => {
        unknown_slot::<{ $table }, $slot> as *const c_void
    };
}

/// Index of each served table in [`TABLES`], for the logs of unknown slots
/// (the context-create bypass, index 4, has none).
const RUNTIME: usize = 0;
const TOOLS_TLS: usize = 1;
const TOOLS_HOOKS: usize = 2;
const CONTEXT_STORAGE: usize = 3;
const HEAP: usize = 5;
const DEVICE_EXT: usize = 6;
const INTEGRITY: usize = 7;
const CONTEXT_CHECKS: usize = 8;
const TOOLS_CONTEXT: usize = 9;
const LIBRARY_SERVICES: usize = 10;
const MODULE_FUNCTIONS: usize = 11;

/// GUIDs as the bytes of a `CUuuid`.
const fn guid(text: &[u8; 32]) -> [u8; 16] {
    const fn nibble(c: u8) -> u8 {
        match c {
            b'0'..=b'9' => c - b'0',
            b'A'..=b'F' => c - b'A' + 10,
            _ => panic!("GUIDs are written in upper-case hex"),
        }
    }
    let mut out = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        out[i] = (nibble(text[2 * i]) << 4) | nibble(text[2 * i + 1]);
        i += 1;
    }
    out
}

/// A served table: (name for the log, GUID, its start).
type Served = (&'static str, [u8; 16], fn() -> *const c_void);

static TABLES: [Served; 13] = [
    ("runtime interface", guid(b"6BD5FB6C5BF4E74A8987D93912FD9DF9"), || RUNTIME_TABLE.start()),
    ("tools TLS", guid(b"42D85A8123F6CB478298F6E78A3AECDC"), || TOOLS_TLS_TABLE.start()),
    ("tools runtime callback hooks", guid(b"A094798C2E742E7493F20800200C0A66"), || TOOLS_HOOKS_TABLE.start()),
    ("context-local storage", guid(b"C693336E1121DF11A8C368F355D89593"), || CONTEXT_STORAGE_TABLE.start()),
    ("context-create bypass", guid(b"0CA50B8C1004929A89A7D0DF10E77286"), || CTX_BYPASS_TABLE.start()),
    ("heap access", guid(b"195BCBF4D67D024AACC51D29CEA631AE"), || HEAP_TABLE.start()),
    ("device extended", guid(b"B10541E1F7C7C74A9F64F223BE99F1E2"), || DEVICE_EXT_TABLE.start()),
    ("integrity check", guid(b"D4082055BDE6704B8D34BA123C66E1F2"), || INTEGRITY_TABLE.start()),
    ("context checks", guid(b"263E88607CD2614392F6BBD5006DFA7E"), || CONTEXT_CHECKS_TABLE.start()),
    ("tools context", guid(b"21318C60971432488CA641FF7324C8F2"), || TOOLS_CONTEXT_TABLE.start()),
    ("library services", guid(b"1734DC26800D47458726C0F1E7DD8BCA"), || LIBRARY_SERVICES_TABLE.start()),
    ("module functions", guid(b"6E163FBEB958444D835CE182AFF1991E"), || MODULE_FUNCTIONS_TABLE.start()),
    ("CUPTI", guid(b"7CB63F9B9CA48E42A484BEB66E6AED7F"), crate::exports::cupti::table),
];

/// The table for `id`, if simgpu serves it.
pub fn find(id: &[u8; 16]) -> Option<(&'static str, *const c_void)> {
    TABLES.iter().find(|(_, g, _)| g == id).map(|(name, _, start)| (*name, start()))
}

/// `cuGetExportTable`'s core.
pub unsafe fn get(table: *mut *const c_void, id: *const CUuuid) -> CuResult<()> {
    if table.is_null() || id.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: checked non-null; a CUuuid is 16 bytes (cuda.h).
    let bytes: [u8; 16] = unsafe { id.read_unaligned() }.bytes.map(|b| b as u8);
    let hex = || bytes.iter().map(|b| format!("{b:02X}")).collect::<String>();
    match find(&bytes) {
        Some((name, start)) => {
            simgpu_debug!("cuGetExportTable {}: {name}", hex());
            // SAFETY: checked non-null; valid for writes by the caller's contract.
            unsafe { out(table, start) }
        }
        None => {
            simgpu_debug!("cuGetExportTable {}: unknown, not served", hex());
            // SAFETY: as above.
            unsafe { out(table, std::ptr::null())? };
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    }
}

// ---- runtime interface -------------------------------------------------

static RUNTIME_TABLE: Table<13> = Table([
    size_word::<13>(),
    module_from_fatbinc as *const c_void,
    primary_context as *const c_void,
    unknown!(RUNTIME, 3),
    unknown!(RUNTIME, 4),
    unknown!(RUNTIME, 5),
    module_from_fatbinc_ext as *const c_void,
    runtime_slot7 as *const c_void,
    module_from_fatbin_ext as *const c_void,
    unknown!(RUNTIME, 9),
    unknown!(RUNTIME, 10),
    unknown!(RUNTIME, 11),
    load_compilers as *const c_void,
]);

/// Loads the fatbin behind a runtime wrapper (`__fatBinC_Wrapper_t`) as a
/// module of the current context: how the runtime loads the kernels it had
/// registered with `__cudaRegisterFatBinary`.
unsafe extern "C" fn module_from_fatbinc(result: *mut CUmodule, wrapper: *const c_void) -> CUresult {
    simgpu_debug!("runtime interface: module from a registered fatbin");
    // SAFETY: the runtime passes its wrapper and an out-parameter.
    guard(|| unsafe { module::load_image(result, wrapper) })
}

/// The same with link options simgpu has no use for.
unsafe extern "C" fn module_from_fatbinc_ext(
    result: *mut CUmodule,
    wrapper: *const c_void,
    _a3: *mut c_void,
    _a4: *mut c_void,
    _a5: c_uint,
) -> CUresult {
    simgpu_debug!("runtime interface: module from a registered fatbin (extended)");
    // SAFETY: as module_from_fatbinc.
    guard(|| unsafe { module::load_image(result, wrapper) })
}

/// The same from the fatbin itself (arguments in the other order).
unsafe extern "C" fn module_from_fatbin_ext(
    fatbin: *const c_void,
    result: *mut CUmodule,
    _a3: *mut c_void,
    _a4: *mut c_void,
    _a5: c_uint,
) -> CUresult {
    simgpu_debug!("runtime interface: module from a fatbin (extended)");
    // SAFETY: as module_from_fatbinc.
    guard(|| unsafe { module::load_image(result, fatbin) })
}

/// The device's primary context handle, active or not; nothing is retained
/// (the runtime retains it through `cuDevicePrimaryCtxRetain`, where the
/// shim charges it).
unsafe extern "C" fn primary_context(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    guard(|| {
        let d = driver()?;
        let i = d.check_device(dev)?;
        // SAFETY: out-parameter from the runtime (null is checked).
        unsafe { out(pctx, ptr(d.devices[i].primary_handle)) }
    })
}

/// Observed to take one word and return nothing; nothing to do here.
extern "C" fn runtime_slot7(_arg: usize) {}

/// Loads the PTX compiler and friends on a real driver. simgpu compiles
/// nothing, so there is nothing to load.
extern "C" fn load_compilers() -> CUresult {
    CUDA_SUCCESS
}

// ---- tools -------------------------------------------------------------

static TOOLS_TLS_TABLE: Table<4> =
    Table([size_word::<4>(), unknown!(TOOLS_TLS, 1), tools_current_context as *const c_void, unknown!(TOOLS_TLS, 3)]);

/// The calling thread's current context, as `cuCtxGetCurrent`.
unsafe extern "C" fn tools_current_context(pctx: *mut CUcontext) -> CUresult {
    // SAFETY: same contract as cuCtxGetCurrent.
    unsafe { crate::exports::context::cuCtxGetCurrent(pctx) }
}

/// Words in the tools context table, size word included, as a 13.x driver
/// serves it; slots 4 (a context's id), 39 (a stream's id) and 51 (the
/// stream a stream argument names) are known.
const TOOLS_CONTEXT_WORDS: usize = 95;

static TOOLS_CONTEXT_TABLE: Table<TOOLS_CONTEXT_WORDS> = Table(tools_context_words());

macro_rules! unknown_slots {
    ($table:expr, $words:ident; $($slot:literal)*) => {
        $( $words[$slot] = unknown!($table, $slot); )*
    };
}

const fn tools_context_words() -> [*const c_void; TOOLS_CONTEXT_WORDS] {
    let mut words = [std::ptr::null(); TOOLS_CONTEXT_WORDS];
    unknown_slots!(TOOLS_CONTEXT, words; 1 2 3 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39
        40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94);
    words[0] = size_word::<TOOLS_CONTEXT_WORDS>();
    words[4] = context_id as *const c_void;
    words[39] = stream_id as *const c_void;
    words[51] = resolve_stream as *const c_void;
    words
}

/// A context's unique id, as `cuCtxGetId`.
unsafe extern "C" fn context_id(ctx: CUcontext, id: *mut u64) -> CUresult {
    // SAFETY: same arguments and contract as cuCtxGetId.
    unsafe { crate::exports::context::cuCtxGetId(ctx, id) }
}

/// The stream a library's stream argument names in `ctx` (null means the
/// current context): null, `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`
/// name the context's default stream (simgpu runs per-thread default
/// streams as the default stream, as everywhere else); `per_thread` says
/// the caller passed `CU_STREAM_PER_THREAD` and changes nothing here. Any
/// other value must be a live stream. cuBLAS (and cuSOLVER through it)
/// calls this, then [`stream_id`] on the answer, to key the workspace it
/// keeps per stream; a driver that refuses either makes every cuBLAS call
/// fail with `CUBLAS_STATUS_INTERNAL_ERROR`.
unsafe extern "C" fn resolve_stream(ctx: CUcontext, stream: CUstream, result: *mut CUstream, per_thread: c_uint) -> CUresult {
    simgpu_debug!("tools context: stream {:#x} of context {:#x} (per-thread {per_thread})", h(stream), h(ctx));
    guard(|| {
        let d = driver()?;
        let c = d.context(h(ctx))?;
        let resolved = if h(stream) <= 2 { c.default_stream.handle } else { d.stream(h(stream))?.1.handle };
        // SAFETY: out-parameter from the library (null is checked).
        unsafe { out(result, ptr(resolved)) }
    })
}

/// A resolved stream's id, as `cuStreamGetId` answers it, so the keys a
/// library builds from it match the ids the public API hands out.
unsafe extern "C" fn stream_id(ctx: CUcontext, stream: CUstream, id: *mut u64) -> CUresult {
    guard(|| {
        let d = driver()?;
        let c = d.context(h(ctx))?;
        let s = if h(stream) == c.default_stream.handle { c.default_stream.clone() } else { d.stream(h(stream))?.1 };
        // SAFETY: out-parameter from the library (null is checked).
        unsafe { out(id, crate::exports::stream::id_of(&s)) }
    })
}

static TOOLS_HOOKS_TABLE: Table<7> = Table([
    size_word::<7>(),
    unknown!(TOOLS_HOOKS, 1),
    tools_hooks_buffer_a as *const c_void,
    unknown!(TOOLS_HOOKS, 3),
    unknown!(TOOLS_HOOKS, 4),
    unknown!(TOOLS_HOOKS, 5),
    tools_hooks_buffer_b as *const c_void,
]);

/// A buffer the runtime fills with its callback hooks for attached tools.
/// No tool is attached to simgpu; the buffers only have to exist. They are
/// eight times the size reported, so a runtime that reads the size as words
/// rather than bytes stays inside.
struct HookBuffer<const WORDS: usize>(UnsafeCell<[u64; WORDS]>);

// SAFETY: simgpu never reads or writes the buffers; only the runtime does.
unsafe impl<const WORDS: usize> Sync for HookBuffer<WORDS> {}

const HOOKS_A_REPORTED: usize = 1024;
const HOOKS_B_REPORTED: usize = 14;
static HOOKS_A: HookBuffer<HOOKS_A_REPORTED> = HookBuffer(UnsafeCell::new([0; HOOKS_A_REPORTED]));
static HOOKS_B: HookBuffer<HOOKS_B_REPORTED> = HookBuffer(UnsafeCell::new([0; HOOKS_B_REPORTED]));

unsafe extern "C" fn tools_hooks_buffer_a(buffer: *mut *mut c_void, size: *mut usize) {
    // SAFETY: out-parameters from the runtime; null is checked by out().
    let _ = unsafe { out(buffer, HOOKS_A.0.get().cast()) };
    // SAFETY: as above.
    let _ = unsafe { out(size, HOOKS_A_REPORTED) };
}

unsafe extern "C" fn tools_hooks_buffer_b(buffer: *mut *mut c_void, size: *mut usize) {
    // SAFETY: out-parameters from the runtime; null is checked by out().
    let _ = unsafe { out(buffer, HOOKS_B.0.get().cast()) };
    // SAFETY: as above.
    let _ = unsafe { out(size, HOOKS_B_REPORTED) };
}

// ---- context-local storage -----------------------------------------------

/// Called with (context, key, value) when a context holding the value goes.
type StorageDestructor = Option<unsafe extern "C" fn(CUcontext, *mut c_void, *mut c_void)>;

static CONTEXT_STORAGE_TABLE: Table<4> =
    Table([storage_put as *const c_void, storage_delete as *const c_void, storage_get as *const c_void, unknown!(CONTEXT_STORAGE, 3)]);

/// (context, key) -> (value, destructor), as addresses.
type Storage = HashMap<(u64, usize), (usize, StorageDestructor)>;

static STORAGE: Mutex<Option<Storage>> = Mutex::new(None);

/// A null context means the current one; any other must exist.
fn storage_context(ctx: CUcontext) -> CuResult<u64> {
    Ok(driver()?.context(h(ctx))?.handle)
}

unsafe extern "C" fn storage_put(ctx: CUcontext, key: *mut c_void, value: *mut c_void, destructor: StorageDestructor) -> CUresult {
    guard(|| {
        let ctx = storage_context(ctx)?;
        crate::exec::lock(&STORAGE).get_or_insert_with(HashMap::new).insert((ctx, key as usize), (value as usize, destructor));
        Ok(())
    })
}

unsafe extern "C" fn storage_delete(ctx: CUcontext, key: *mut c_void) -> CUresult {
    guard(|| {
        let ctx = storage_context(ctx)?;
        crate::exec::lock(&STORAGE).get_or_insert_with(HashMap::new).remove(&(ctx, key as usize));
        Ok(())
    })
}

unsafe extern "C" fn storage_get(value: *mut *mut c_void, ctx: CUcontext, key: *mut c_void) -> CUresult {
    guard(|| {
        let ctx = storage_context(ctx)?;
        let found = crate::exec::lock(&STORAGE).as_ref().and_then(|m| m.get(&(ctx, key as usize)).map(|(v, _)| *v));
        let found = found.ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        // SAFETY: out-parameter from the runtime (null is checked).
        unsafe { out(value, found as *mut c_void) }
    })
}

/// Runs the destructors of everything stored for `ctx` (the context is
/// being destroyed) and forgets it. Called without simgpu locks held, as
/// the runtime's destructors call back into the driver.
pub fn context_destroyed(ctx: u64) {
    let gone: Vec<(usize, usize, StorageDestructor)> = {
        let mut storage = crate::exec::lock(&STORAGE);
        let Some(map) = storage.as_mut() else { return };
        let keys: Vec<(u64, usize)> = map.keys().filter(|(c, _)| *c == ctx).copied().collect();
        keys.into_iter().filter_map(|k| map.remove(&k).map(|(value, dtor)| (k.1, value, dtor))).collect()
    };
    for (key, value, destructor) in gone {
        if let Some(destructor) = destructor {
            simgpu_debug!("context-local storage: destructor for key {key:#x} of a destroyed context");
            // SAFETY: the runtime registered this destructor for this
            // (context, key, value) and expects it called when the context goes.
            unsafe { destructor(ptr(ctx), key as *mut c_void, value as *mut c_void) };
        }
    }
}

// ---- context-create bypass, heap, device extended ------------------------

static CTX_BYPASS_TABLE: Table<2> = Table([size_word::<2>(), ctx_create_bypass as *const c_void]);

/// A context created the way `cuCtxCreate_v2` creates one.
unsafe extern "C" fn ctx_create_bypass(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CUresult {
    simgpu_debug!("context-create bypass: creating a context on device {dev}");
    // SAFETY: same arguments and contract as cuCtxCreate_v2.
    unsafe { crate::exports::context::cuCtxCreate_v2(pctx, flags, dev) }
}

static HEAP_TABLE: Table<3> = Table([size_word::<3>(), unknown!(HEAP, 1), unknown!(HEAP, 2)]);

/// Asked for by cuBLASLt (13.x) when it picks a matmul algorithm; it calls
/// slot 4 without checking that the table came back, so a driver without
/// it crashes cuBLASLt. Its slots' meaning is not known; each answers
/// "not supported", and cuBLASLt takes its fallback on that answer.
static LIBRARY_SERVICES_TABLE: Table<9> = Table([
    size_word::<9>(),
    unknown!(LIBRARY_SERVICES, 1),
    unknown!(LIBRARY_SERVICES, 2),
    unknown!(LIBRARY_SERVICES, 3),
    unknown!(LIBRARY_SERVICES, 4),
    unknown!(LIBRARY_SERVICES, 5),
    unknown!(LIBRARY_SERVICES, 6),
    unknown!(LIBRARY_SERVICES, 7),
    unknown!(LIBRARY_SERVICES, 8),
]);

static DEVICE_EXT_TABLE: Table<26> = Table([
    size_word::<26>(),
    unknown!(DEVICE_EXT, 1),
    unknown!(DEVICE_EXT, 2),
    unknown!(DEVICE_EXT, 3),
    unknown!(DEVICE_EXT, 4),
    unknown!(DEVICE_EXT, 5),
    unknown!(DEVICE_EXT, 6),
    unknown!(DEVICE_EXT, 7),
    unknown!(DEVICE_EXT, 8),
    unknown!(DEVICE_EXT, 9),
    unknown!(DEVICE_EXT, 10),
    unknown!(DEVICE_EXT, 11),
    unknown!(DEVICE_EXT, 12),
    device_flag_13 as *const c_void,
    unknown!(DEVICE_EXT, 14),
    unknown!(DEVICE_EXT, 15),
    unknown!(DEVICE_EXT, 16),
    unknown!(DEVICE_EXT, 17),
    unknown!(DEVICE_EXT, 18),
    unknown!(DEVICE_EXT, 19),
    unknown!(DEVICE_EXT, 20),
    unknown!(DEVICE_EXT, 21),
    unknown!(DEVICE_EXT, 22),
    unknown!(DEVICE_EXT, 23),
    unknown!(DEVICE_EXT, 24),
    unknown!(DEVICE_EXT, 25),
]);

/// A per-device byte real drivers were seen to answer 0.
unsafe extern "C" fn device_flag_13(result: *mut u8, dev: CUdevice) -> CUresult {
    guard(|| {
        driver()?.check_device(dev)?;
        // SAFETY: out-parameter from the runtime (null is checked).
        unsafe { out(result, 0) }
    })
}

// ---- module functions ----------------------------------------------------

/// Words in the module-functions table, size word included: enough for
/// every slot public reimplementations name (the last is 55). Only slot 7
/// is known; cuFFT checks that the table is longer than seven words.
const MODULE_FUNCTIONS_WORDS: usize = 56;

static MODULE_FUNCTIONS_TABLE: Table<MODULE_FUNCTIONS_WORDS> = Table(module_functions_words());

const fn module_functions_words() -> [*const c_void; MODULE_FUNCTIONS_WORDS] {
    let mut words = [std::ptr::null(); MODULE_FUNCTIONS_WORDS];
    unknown_slots!(MODULE_FUNCTIONS, words; 1 2 3 4 5 6 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39
        40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55);
    words[0] = size_word::<MODULE_FUNCTIONS_WORDS>();
    words[7] = visit_module_functions as *const c_void;
    words
}

/// Called once per kernel of a module with the caller's `opaque` pointer,
/// the kernel's function handle and a word whose meaning is not known
/// (simgpu passes 0; cuFFT ignores it).
type FunctionVisitor = Option<unsafe extern "C" fn(*mut c_void, CUfunction, u64)>;

/// Calls `visit` for each kernel of `module` (of context `ctx`) and answers
/// how many it visited, 0 when there is nothing to visit or the arguments
/// are bad: the answer is a count, not a `CUresult`. cuFFT loads each of its
/// kernels as a module of one and takes the kernel's handle this way; any
/// answer but 1 makes its plan fail with `CUFFT_INTERNAL_ERROR`.
unsafe extern "C" fn visit_module_functions(ctx: CUcontext, module: CUmodule, visit: FunctionVisitor, opaque: *mut c_void) -> c_uint {
    let Some(visit) = visit else { return 0 };
    let functions = || -> CuResult<Vec<u64>> {
        driver()?.context(h(ctx))?;
        let names = module::named_kernels(h(module))?;
        names.iter().map(|name| module::function_of(h(module), name)).collect()
    };
    let Ok(functions) = functions() else { return 0 };
    simgpu_debug!("module functions: {} kernel(s) of module {:#x}", functions.len(), h(module));
    for &f in &functions {
        // SAFETY: the library's own visitor, called with the pointer it
        // gave for it and a live function handle.
        unsafe { visit(opaque, ptr(f), 0) };
    }
    functions.len() as c_uint
}

// ---- context checks ------------------------------------------------------

static CONTEXT_CHECKS_TABLE: Table<4> =
    Table([size_word::<4>(), unknown!(CONTEXT_CHECKS, 1), context_check as *const c_void, context_check_flags as *const c_void]);

/// "Is anything unusual about this context?": never, on simgpu.
unsafe extern "C" fn context_check(_ctx: CUcontext, result: *mut u32, _detail: *mut *const c_void) -> CUresult {
    // SAFETY: out-parameter from the runtime (null is checked).
    guard(|| unsafe { out(result, 0) })
}

extern "C" fn context_check_flags() -> u32 {
    0
}

// ---- integrity check -----------------------------------------------------

/// `CU_DEVICE_ATTRIBUTE_PCI_BUS_ID`.
const PCI_BUS_ID_ATTRIBUTE: c_int = 33;

static INTEGRITY_TABLE: Table<3> = Table([size_word::<3>(), integrity_check as *const c_void, unknown!(INTEGRITY, 2)]);

/// The runtime checks that it talks to a driver by asking for a digest of
/// (driver version, its own request version, process, thread, the addresses
/// of two tables and of this function, the time it passes, and every
/// device's UUID and PCI location), which it computes too and compares.
unsafe extern "C" fn integrity_check(version: u32, unix_seconds: u64, result: *mut [u64; 2]) -> CUresult {
    guard(|| {
        let d = driver()?;
        let devices: Vec<integrity::Device> = d
            .visible
            .iter()
            .map(|&physical| integrity::Device {
                uuid: crate::driver::device_uuid(&d.machine.state, physical),
                pci_domain: 0,
                pci_bus: crate::exports::device::attribute(PCI_BUS_ID_ATTRIBUTE, physical).unwrap_or(0),
                pci_device: 0,
            })
            .collect();
        let input = integrity::Input {
            driver_version: crate::driver::DRIVER_VERSION as u32,
            version,
            process: std::process::id(),
            // SAFETY: pthread_self has no preconditions.
            thread: unsafe { libc::pthread_self() } as u32,
            runtime_table: RUNTIME_TABLE.start() as u64,
            integrity_table: INTEGRITY_TABLE.start() as u64,
            // The slot's own word: the address the runtime called.
            function: INTEGRITY_TABLE.0[1] as u64,
            unix_seconds,
        };
        simgpu_debug!("integrity check version {version}");
        // SAFETY: out-parameter from the runtime (null is checked).
        unsafe { out(result, integrity::digest(&input, &devices)) }
    })
}

/// The integrity digest: an HMAC (RFC 2104) over MD2 (RFC 1319) with a
/// fixed key, of the fields below in this order, little-endian.
pub mod integrity {
    pub struct Input {
        pub driver_version: u32,
        pub version: u32,
        pub process: u32,
        pub thread: u32,
        pub runtime_table: u64,
        pub integrity_table: u64,
        pub function: u64,
        pub unix_seconds: u64,
    }

    pub struct Device {
        pub uuid: [u8; 16],
        pub pci_domain: i32,
        pub pci_bus: i32,
        pub pci_device: i32,
    }

    const KEY: [u8; 16] = [0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52, 0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F];

    /// Versions ending in 0 and 1 are answered with constants.
    pub fn digest(input: &Input, devices: &[Device]) -> [u64; 2] {
        match input.version % 10 {
            0 => return [0x3341_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8],
            1 => return [0x1841_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8],
            _ => {}
        }
        let mut message = Vec::with_capacity(48 + 28 * devices.len());
        for word in [input.driver_version, input.version, input.process, input.thread] {
            message.extend_from_slice(&word.to_le_bytes());
        }
        for word in [input.runtime_table, input.integrity_table, input.function, input.unix_seconds] {
            message.extend_from_slice(&word.to_le_bytes());
        }
        for d in devices {
            message.extend_from_slice(&d.uuid);
            for word in [d.pci_domain, d.pci_bus, d.pci_device] {
                message.extend_from_slice(&word.to_le_bytes());
            }
        }
        let mac = hmac_md2(&KEY, &message);
        [u64::from_le_bytes(mac[..8].try_into().unwrap_or_default()), u64::from_le_bytes(mac[8..].try_into().unwrap_or_default())]
    }

    fn hmac_md2(key: &[u8; 16], message: &[u8]) -> [u8; 16] {
        let mut inner = Md2::default();
        inner.update(&key.map(|b| b ^ 0x36));
        inner.update(message);
        let inner = inner.finish();
        let mut outer = Md2::default();
        outer.update(&key.map(|b| b ^ 0x5c));
        outer.update(&inner);
        outer.finish()
    }

    /// MD2's substitution table: a permutation of 0..=255 built from the digits of pi.
    const PI_SUBST: [u8; 256] = [
        41, 46, 67, 201, 162, 216, 124, 1, 61, 54, 84, 161, 236, 240, 6, 19, 98, 167, 5, 243, 192, 199, 115, 140, 152, 147, 43, 217, 188,
        76, 130, 202, 30, 155, 87, 60, 253, 212, 224, 22, 103, 66, 111, 24, 138, 23, 229, 18, 190, 78, 196, 214, 218, 158, 222, 73, 160,
        251, 245, 142, 187, 47, 238, 122, 169, 104, 121, 145, 21, 178, 7, 63, 148, 194, 16, 137, 11, 34, 95, 33, 128, 127, 93, 154, 90,
        144, 50, 39, 53, 62, 204, 231, 191, 247, 151, 3, 255, 25, 48, 179, 72, 165, 181, 209, 215, 94, 146, 42, 172, 86, 170, 198, 79, 184,
        56, 210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4, 241, 69, 157, 112, 89, 100, 113, 135, 32, 134, 91, 207, 101, 230, 45,
        168, 2, 27, 96, 37, 173, 174, 176, 185, 246, 28, 70, 97, 105, 52, 64, 126, 15, 85, 71, 163, 35, 221, 81, 175, 58, 195, 92, 249,
        206, 186, 197, 234, 38, 44, 83, 13, 110, 133, 40, 132, 9, 211, 223, 205, 244, 65, 129, 77, 82, 106, 220, 55, 200, 108, 193, 171,
        250, 36, 225, 123, 8, 12, 189, 177, 74, 120, 136, 149, 139, 227, 99, 232, 109, 233, 203, 213, 254, 59, 0, 29, 57, 242, 239, 183,
        14, 102, 88, 208, 228, 166, 119, 114, 248, 235, 117, 75, 10, 49, 68, 80, 180, 143, 237, 31, 26, 219, 153, 141, 51, 159, 17, 131,
        20,
    ];

    /// MD2 (RFC 1319), streaming.
    #[derive(Default)]
    struct Md2 {
        state: [u8; 16],
        checksum: [u8; 16],
        block: [u8; 16],
        filled: usize,
    }

    impl Md2 {
        fn update(&mut self, bytes: &[u8]) {
            for &b in bytes {
                self.block[self.filled] = b;
                self.filled += 1;
                if self.filled == 16 {
                    self.compress();
                    self.filled = 0;
                }
            }
        }

        fn compress(&mut self) {
            let mut last = self.checksum[15];
            for j in 0..16 {
                self.checksum[j] ^= PI_SUBST[(self.block[j] ^ last) as usize];
                last = self.checksum[j];
            }
            let mut x = [0u8; 48];
            x[..16].copy_from_slice(&self.state);
            x[16..32].copy_from_slice(&self.block);
            for j in 0..16 {
                x[32 + j] = self.state[j] ^ self.block[j];
            }
            let mut t = 0u8;
            for round in 0..18u8 {
                for byte in x.iter_mut() {
                    *byte ^= PI_SUBST[t as usize];
                    t = *byte;
                }
                t = t.wrapping_add(round);
            }
            self.state.copy_from_slice(&x[..16]);
        }

        fn finish(mut self) -> [u8; 16] {
            let pad = (16 - self.filled) as u8;
            self.update(&vec![pad; pad as usize]);
            let checksum = self.checksum;
            self.update(&checksum);
            self.state
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn md2(bytes: &[u8]) -> String {
            let mut m = Md2::default();
            m.update(bytes);
            m.finish().iter().map(|b| format!("{b:02x}")).collect()
        }

        #[test]
        fn the_inner_hash_of_the_key_block_is_the_runtimes() {
            let mut m = Md2::default();
            m.update(&KEY.map(|b| b ^ 0x36));
            let state: String = m.state.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(state, "8b219a49e86d1aeef237f9b54a8c3c75");
            let checksum: String = m.checksum.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(checksum, "57a110860e60441e705f67d1eb67a13d");
        }

        #[test]
        fn md2_matches_rfc_1319() {
            assert_eq!(md2(b""), "8350e5a3e24c153df2275c9f80692773");
            assert_eq!(md2(b"abc"), "da853b0d3f88d99b30283a69e6ded6bb");
            assert_eq!(md2(b"message digest"), "ab4f496bfb2a530b219ff33031fe06b0");
            assert_eq!(
                md2(b"12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
                "d5976f79d83d3a0dc9806c3c66f3efd8"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_is_found_by_its_guid_and_starts_with_its_size() {
        for (name, id, _) in &TABLES {
            let (found, start) = find(id).unwrap_or_else(|| panic!("{name} not found"));
            assert_eq!(found, *name);
            assert!(!start.is_null());
        }
        assert_eq!(RUNTIME_TABLE.0[0] as usize, 13 * 8);
        assert_eq!(DEVICE_EXT_TABLE.0[0] as usize, 26 * 8);
        assert!(find(&[0u8; 16]).is_none());
        assert_eq!(guid(b"6BD5FB6C5BF4E74A8987D93912FD9DF9")[..4], [0x6B, 0xD5, 0xFB, 0x6C]);
    }
}
