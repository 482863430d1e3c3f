//! Memory the shim cannot tie to a device it knows is refused by the shim
//! itself: it is never handed to the driver uncharged in the hope that the
//! driver refuses it. simgpu refuses such calls, as a careful driver would,
//! but a real one may not, so these tests run over a driver that accepts
//! everything (`tests/c/accepting_driver.c`): what they see is the shim's
//! decision alone. The same driver exports aliases (several names at one
//! address), as libcuda does, so `cuGetProcAddress`'s choice among the
//! shim's hooks rests on the shim's version table.

use gpuslice_tests::{cu, Output, Sim, GIB, MIB};

const TENANT: &str = "placement";

fn accepting() -> Sim {
    Sim::new().driver("accepting_driver").memory_limit("1GiB").tenant(TENANT)
}

/// `CU_MEM_LOCATION_TYPE_*` (cuda.h).
mod location {
    pub const NONE: &str = "0";
    pub const DEVICE: &str = "1";
    pub const HOST: &str = "2";
    pub const HOST_NUMA: &str = "3";
    pub const INVISIBLE: &str = "5";
    pub const DEVICE_LOCALITY_DOMAIN: &str = "6";
    /// A type newer than any the shim knows.
    pub const FUTURE: &str = "9";
}

fn refusal_lines(out: &Output) -> Vec<&str> {
    out.stderr.lines().filter(|l| l.contains("gpuslice[") && l.contains("refused")).collect()
}

#[test]
fn memory_no_known_device_can_be_charged_for_is_refused() {
    use location::*;
    let sim = accepting();
    let vmm = |name: &str, t: &str, id: &str| format!("vmm:{name}:{t}:{id}:64M");
    let pool = |name: &str, t: &str, id: &str| format!("pool:{name}:{t}:{id}:64M");
    let out = sim.run(sim.c("shim_placement").args([
        "init".to_string(),
        vmm("unseen", DEVICE, "3"),
        vmm("domain", DEVICE_LOCALITY_DOMAIN, "0"),
        vmm("invisible", INVISIBLE, "0"),
        vmm("unspecified", NONE, "0"),
        vmm("future", FUTURE, "0"),
        "nullprop:noprop".to_string(),
        pool("unseenpool", DEVICE, "3"),
        pool("domainpool", DEVICE_LOCALITY_DOMAIN, "0"),
        pool("futurepool", FUTURE, "0"),
        "mutepool:mute:64M".to_string(),
        "info:after".to_string(),
    ]));
    out.assert_success();
    out.assert_rc("unseen", cu::INVALID_DEVICE).assert_rc("unseenpool", cu::INVALID_DEVICE);
    for name in ["domain", "invisible", "unspecified", "future", "domainpool", "futurepool"] {
        out.assert_rc(name, cu::NOT_SUPPORTED);
    }
    // The driver's own answers: no properties, and a pool that cannot say
    // where it lives.
    out.assert_rc("noprop", cu::INVALID_VALUE).assert_rc("mute", cu::NOT_SUPPORTED);
    assert_eq!(out.u64("after.free"), GIB, "nothing was charged, so nothing may have been allocated\n{out}");
    let refusals = refusal_lines(&out);
    assert_eq!(refusals.len(), 9, "one line for each refusal the shim made\n{out}");
    assert!(refusals.iter().any(|l| l.contains("cuMemCreate on device 3")), "{out}");
    assert!(refusals.iter().any(|l| l.contains("CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN")), "{out}");
    assert!(refusals.iter().any(|l| l.contains("cannot say where the pool's memory lives")), "{out}");
}

#[test]
fn device_memory_is_charged_where_it_is_placed_and_host_memory_is_not() {
    use location::*;
    let sim = accepting();
    let out = sim.run(sim.c("shim_placement").args([
        "init".to_string(),
        format!("vmm:dev:{DEVICE}:0:64M"),
        "info:vmm".to_string(),
        format!("vmm:host:{HOST}:0:64M"),
        format!("vmm:numa:{HOST_NUMA}:1:64M"),
        "info:host".to_string(),
        format!("pool:devpool:{DEVICE}:0:64M"),
        "info:pool".to_string(),
        format!("pool:hostpool:{HOST}:0:64M"),
        format!("pool:managed:{NONE}:0:32M"),
        "info:end".to_string(),
        format!("vmm:over:{DEVICE}:0:900M"),
    ]));
    out.assert_success();
    for name in ["dev", "host", "numa", "devpool", "hostpool", "managed"] {
        out.assert_rc(name, cu::SUCCESS);
    }
    assert_eq!(out.u64("vmm.free"), GIB - 64 * MIB, "{out}");
    assert_eq!(out.u64("host.free"), GIB - 64 * MIB, "host memory is not the device's\n{out}");
    assert_eq!(out.u64("pool.free"), GIB - 128 * MIB, "{out}");
    assert_eq!(out.u64("end.free"), GIB - 160 * MIB, "a managed pool is charged to the stream's device\n{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY);
    assert!(refusal_lines(&out).is_empty(), "{out}");
}

/// The driver answers one address for both names of each family; the hook
/// handed back is the one for the variant the requested version means.
#[test]
fn aliased_driver_functions_get_the_hook_their_version_names() {
    let sim = accepting();
    let asks = [
        ("cuDevicePrimaryCtxRelease", 7000, "cuDevicePrimaryCtxRelease"),
        ("cuDevicePrimaryCtxRelease", 11000, "cuDevicePrimaryCtxRelease_v2"),
        ("cuDevicePrimaryCtxReset", 7000, "cuDevicePrimaryCtxReset"),
        ("cuDevicePrimaryCtxReset", 12000, "cuDevicePrimaryCtxReset_v2"),
        ("cuCtxDestroy", 2000, "cuCtxDestroy"),
        ("cuCtxDestroy", 4000, "cuCtxDestroy_v2"),
    ];
    let mut cmd = sim.c("shim_placement");
    cmd.arg("init");
    for (name, version, symbol) in asks {
        cmd.arg(format!("proc:{name}:{version}:{symbol}"));
    }
    let out = sim.run(&mut cmd);
    out.assert_success();
    for (name, version, symbol) in asks {
        let key = format!("proc.{name}.{version}");
        out.assert_rc(&key, cu::SUCCESS);
        assert_eq!(out.get(&format!("{key}.is")), symbol, "{key}\n{out}");
    }
}
