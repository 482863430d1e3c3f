//! `CUDA_VISIBLE_DEVICES` on the simulated GPU, as the real driver honours
//! it: ordinals are positions in the list (indices or UUIDs, UUID prefixes
//! accepted), an invalid entry ends the list, an empty list hides every
//! device, and NVML ignores it.

use gpuslice_tests::{cu, Output, Sim, MIB};

fn run(sim: &Sim, visible: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = sim.c("sim_visible");
    cmd.args(args);
    if let Some(v) = visible {
        cmd.env("CUDA_VISIBLE_DEVICES", v);
    }
    let out = sim.run(&mut cmd);
    out.assert_success();
    out
}

fn uuids(out: &Output, prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| out.get(&format!("{prefix}.{i}.uuid")).to_string()).collect()
}

#[test]
fn ordinals_follow_the_list_and_nvml_shows_every_device() {
    let sim = Sim::new().devices(4).memory("1GiB").context_memory("64MiB");
    let all = run(&sim, None, &[]);
    all.assert_rc("init", cu::SUCCESS);
    assert_eq!(all.i64("count"), 4, "{all}");
    let physical = uuids(&all, "dev", 4);
    assert_eq!(uuids(&all, "nvml", 4), physical, "without the variable, ordinals are NVML indices\n{all}");

    // Indices, reordered: ordinal 0 is physical 2, ordinal 1 is physical 0.
    let out = run(&sim, Some("2,0"), &["100M"]);
    out.assert_rc("init", cu::SUCCESS);
    assert_eq!(out.i64("count"), 2, "{out}");
    assert_eq!(uuids(&out, "dev", 2), vec![physical[2].clone(), physical[0].clone()], "{out}");
    assert_eq!(out.get("dev.0.pci"), all.get("dev.2.pci"), "{out}");
    assert_eq!((out.i64("dev.0.ctx_device"), out.i64("dev.1.ctx_device")), (0, 1), "cuCtxGetDevice reports ordinals\n{out}");
    out.assert_rc("get_past_end", cu::INVALID_DEVICE);
    // NVML ignores the variable: all four devices in physical order, and the
    // allocation made on ordinal 0 shows on physical device 2.
    assert_eq!(out.i64("nvml.count"), 4, "{out}");
    assert_eq!(uuids(&out, "nvml", 4), physical, "{out}");
    assert!(out.u64("nvml.2.used") >= 100 * MIB, "ordinal 0 is physical device 2\n{out}");
    assert!(out.u64("nvml.1.used") == 0 && out.u64("nvml.3.used") == 0, "{out}");

    // A full UUID, then a unique prefix (GPU- included), then an index.
    let prefix = &physical[3][..12];
    let out = run(&sim, Some(&format!("{},{prefix},0", physical[1])), &[]);
    assert_eq!(out.i64("count"), 3, "{out}");
    assert_eq!(uuids(&out, "dev", 3), vec![physical[1].clone(), physical[3].clone(), physical[0].clone()], "{out}");
}

#[test]
fn an_invalid_entry_ends_the_list() {
    let sim = Sim::new().devices(3).memory("1GiB").context_memory("64MiB");
    let physical = uuids(&run(&sim, None, &[]), "dev", 3);
    for (value, expected) in [("0,2,-1,1", vec![0, 2]), ("1,7,0", vec![1]), ("2,2,0", vec![2]), ("1,GPU-zz,0", vec![1]), ("0,,1", vec![0])]
    {
        let out = run(&sim, Some(value), &[]);
        out.assert_rc("init", cu::SUCCESS);
        let want: Vec<String> = expected.iter().map(|&i| physical[i].clone()).collect();
        assert_eq!(out.i64("count"), want.len() as i64, "CUDA_VISIBLE_DEVICES={value}\n{out}");
        assert_eq!(uuids(&out, "dev", want.len()), want, "CUDA_VISIBLE_DEVICES={value}\n{out}");
        assert_eq!(out.i64("nvml.count"), 3, "{out}");
    }
}

#[test]
fn an_empty_or_wholly_invalid_list_hides_every_device_from_the_driver_only() {
    let sim = Sim::new().devices(2).memory("1GiB").context_memory("64MiB");
    for value in ["", "-1", "5", "GPU-no-such-device"] {
        let out = run(&sim, Some(value), &[]);
        out.assert_rc("init", 100); // CUDA_ERROR_NO_DEVICE
        assert_eq!(out.i64("count"), 0, "CUDA_VISIBLE_DEVICES={value:?}\n{out}");
        out.assert_rc("get_past_end", cu::INVALID_DEVICE);
        assert_eq!(out.i64("nvml.count"), 2, "NVML ignores CUDA_VISIBLE_DEVICES\n{out}");
    }
}
