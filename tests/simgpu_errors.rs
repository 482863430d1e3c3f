//! Bad handles and bad arguments get the error codes `cuda.h` documents, and
//! never crash the process.

use gpuslice_tests::{cu, Sim};

#[test]
fn bad_handles_and_arguments_get_the_documented_errors() {
    let sim = Sim::new();
    let out = sim.run(&mut sim.c("sim_errors"));
    out.assert_success();
    assert_eq!(out.get("survived"), "1", "{out}");

    let exact: &[(&str, i64)] = &[
        ("pre.device_get", cu::NOT_INITIALIZED),
        ("pre.device_count", cu::NOT_INITIALIZED),
        ("pre.mem_alloc", cu::NOT_INITIALIZED),
        ("pre.mem_get_info", cu::NOT_INITIALIZED),
        ("null.device_count", cu::INVALID_VALUE),
        ("null.device_get", cu::INVALID_VALUE),
        ("null.device_name", cu::INVALID_VALUE),
        ("null.total_mem", cu::INVALID_VALUE),
        ("null.driver_version", cu::INVALID_VALUE),
        ("ordinal.device_get", cu::INVALID_DEVICE),
        ("ordinal.device_get_negative", cu::INVALID_DEVICE),
        ("ordinal.device_name", cu::INVALID_DEVICE),
        ("ordinal.total_mem", cu::INVALID_DEVICE),
        ("ordinal.attribute", cu::INVALID_DEVICE),
        ("ordinal.primary_retain", cu::INVALID_DEVICE),
        ("attribute.unknown", cu::INVALID_VALUE),
        ("noctx.mem_alloc", cu::INVALID_CONTEXT),
        ("noctx.mem_get_info", cu::INVALID_CONTEXT),
        ("noctx.ctx_get_device", cu::INVALID_CONTEXT),
        ("mem.alloc_null", cu::INVALID_VALUE),
        ("mem.alloc_zero", cu::INVALID_VALUE),
        ("mem.free_unknown", cu::INVALID_VALUE),
        ("mem.free_first", cu::SUCCESS),
        ("mem.free_again", cu::INVALID_VALUE),
        ("mem.pitch_bad_element", cu::INVALID_VALUE),
        ("mem.get_info_null", cu::INVALID_VALUE),
        ("vmm.create_unaligned", cu::INVALID_VALUE),
        ("vmm.create_zero", cu::INVALID_VALUE),
        ("vmm.create_bad_device", cu::INVALID_DEVICE),
        ("module.function_null_name", cu::INVALID_VALUE),
        ("proc.unknown", cu::NOT_FOUND),
        ("proc.known", cu::SUCCESS),
        ("proc.known.call", cu::SUCCESS),
        ("proc.known.free", cu::SUCCESS),
        ("proc.null_status", cu::SUCCESS),
        // An export table simgpu does not serve, as a driver answers an unknown GUID.
        ("export_table", cu::INVALID_VALUE),
        ("error_name", cu::SUCCESS),
        ("error_name.unknown", cu::INVALID_VALUE),
        ("error_string", cu::SUCCESS),
    ];
    for &(key, expected) in exact {
        out.assert_rc(key, expected);
    }
    // cuda.h lists more than one code for these; any documented one will do.
    let one_of: &[(&str, &[i64])] = &[
        ("ctx.destroyed.push", &[cu::INVALID_CONTEXT, 709]),
        ("ctx.destroyed.destroy", &[cu::INVALID_CONTEXT, cu::INVALID_VALUE, 709]),
        ("ctx.madeup.set_current", &[cu::INVALID_CONTEXT, cu::INVALID_HANDLE]),
        ("ctx.madeup.destroy", &[cu::INVALID_CONTEXT, cu::INVALID_HANDLE, cu::INVALID_VALUE]),
        ("stream.madeup_sync", &[cu::INVALID_HANDLE, cu::INVALID_CONTEXT]),
        ("stream.madeup_query", &[cu::INVALID_HANDLE, cu::INVALID_CONTEXT]),
        ("event.madeup_sync", &[cu::INVALID_HANDLE, cu::INVALID_VALUE]),
        ("event.madeup_record", &[cu::INVALID_HANDLE, cu::INVALID_VALUE]),
        ("launch.null_function", &[cu::INVALID_HANDLE, cu::INVALID_VALUE]),
        ("launch.madeup_function", &[cu::INVALID_HANDLE, cu::INVALID_VALUE]),
        ("module.madeup_get_function", &[cu::INVALID_HANDLE, cu::INVALID_VALUE]),
        ("proc.too_new", &[cu::NOT_FOUND]),
    ];
    for &(key, accepted) in one_of {
        let actual = out.i64(key);
        assert!(accepted.contains(&actual), "`{key}`: expected one of {accepted:?}, got {actual}\n{out}");
    }
    assert_eq!(out.i64("proc.unknown.status"), 1, "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND\n{out}");
    assert_eq!(out.get("proc.unknown.null"), "1", "{out}");
    assert_eq!(out.i64("proc.too_new.status"), 2, "CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT\n{out}");
    assert_eq!(out.i64("proc.known.status"), 0, "{out}");
    assert_eq!(out.get("error_name.text"), "CUDA_ERROR_OUT_OF_MEMORY", "{out}");
    assert_eq!(out.get("error_string.empty"), "0", "{out}");
    assert!(out.u64("vmm.granularity") > 0, "{out}");
}

#[test]
fn invalid_simgpu_settings_fail_cu_init_and_say_why() {
    for (var, value) in [("SIMGPU_MEMORY", "lots"), ("SIMGPU_DEVICES", "two"), ("SIMGPU_CONTEXT_MEMORY", "1Q")] {
        let sim = Sim::new().env(var, value);
        let out = sim.run(sim.c("memctl").args(["init", "ctx", "alloc:a:1M"]));
        out.assert_success();
        // The driver's word for a bad setting, then for calls without cuInit.
        out.assert_rc("init", cu::INVALID_VALUE).assert_rc("a", cu::NOT_INITIALIZED);
        assert!(out.stderr.contains(var) && out.stderr.contains(value), "stderr must name {var}={value}\n{out}");
    }
}
