//! How the driver maps (name, requested version, flags) to a symbol, for the
//! functions whose families the shim hooks.
//!
//! Transcribed from `cudaTypedefs.h`: each `PFN_<name>_v<version>` is one
//! variant, available from that CUDA version on. `cuGetProcAddress` returns
//! the newest variant whose version is at most the requested one; with
//! `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` it returns the `_ptsz`
//! variant where one exists. Variants the shim does not hook (the 32-bit
//! `cuMemAlloc` of CUDA 2.0, say) are listed too, so that asking for them
//! passes the driver's answer through untouched.

use abi::cuda::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

/// One symbol of a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    pub symbol: &'static str,
    /// The CUDA version it appeared in (`1000 × major + 10 × minor`).
    pub since: i32,
    /// A per-thread default-stream (`_ptsz`) form.
    pub per_thread: bool,
}

const fn v(symbol: &'static str, since: i32) -> Variant {
    Variant { symbol, since, per_thread: false }
}

const fn ptsz(symbol: &'static str, since: i32) -> Variant {
    Variant { symbol, since, per_thread: true }
}

/// Base name → its variants.
pub static FAMILIES: &[(&str, &[Variant])] = &[
    ("cuInit", &[v("cuInit", 2000)]),
    ("cuGetProcAddress", &[v("cuGetProcAddress", 11030), v("cuGetProcAddress_v2", 12000)]),
    ("cuMemAlloc", &[v("cuMemAlloc", 2000), v("cuMemAlloc_v2", 3020)]),
    ("cuMemAllocPitch", &[v("cuMemAllocPitch", 2000), v("cuMemAllocPitch_v2", 3020)]),
    ("cuMemAllocManaged", &[v("cuMemAllocManaged", 6000)]),
    ("cuMemAllocAsync", &[v("cuMemAllocAsync", 11020), ptsz("cuMemAllocAsync_ptsz", 11020)]),
    ("cuMemAllocFromPoolAsync", &[v("cuMemAllocFromPoolAsync", 11020), ptsz("cuMemAllocFromPoolAsync_ptsz", 11020)]),
    ("cuMemCreate", &[v("cuMemCreate", 10020)]),
    ("cuMemRelease", &[v("cuMemRelease", 10020)]),
    ("cuMemRetainAllocationHandle", &[v("cuMemRetainAllocationHandle", 11000)]),
    ("cuMemMap", &[v("cuMemMap", 10020)]),
    ("cuMemUnmap", &[v("cuMemUnmap", 10020)]),
    ("cuArrayCreate", &[v("cuArrayCreate", 2000), v("cuArrayCreate_v2", 3020)]),
    ("cuArray3DCreate", &[v("cuArray3DCreate", 2000), v("cuArray3DCreate_v2", 3020)]),
    ("cuArrayDestroy", &[v("cuArrayDestroy", 2000)]),
    ("cuMipmappedArrayCreate", &[v("cuMipmappedArrayCreate", 5000)]),
    ("cuMipmappedArrayDestroy", &[v("cuMipmappedArrayDestroy", 5000)]),
    ("cuMemFree", &[v("cuMemFree", 2000), v("cuMemFree_v2", 3020)]),
    ("cuMemFreeAsync", &[v("cuMemFreeAsync", 11020), ptsz("cuMemFreeAsync_ptsz", 11020)]),
    ("cuMemGetInfo", &[v("cuMemGetInfo", 2000), v("cuMemGetInfo_v2", 3020)]),
    ("cuDeviceTotalMem", &[v("cuDeviceTotalMem", 2000), v("cuDeviceTotalMem_v2", 3020)]),
    (
        "cuCtxCreate",
        &[v("cuCtxCreate", 2000), v("cuCtxCreate_v2", 3020), v("cuCtxCreate_v3", 11040), v("cuCtxCreate_v4", 12050)],
    ),
    ("cuCtxDestroy", &[v("cuCtxDestroy", 2000), v("cuCtxDestroy_v2", 4000)]),
    ("cuDevicePrimaryCtxRetain", &[v("cuDevicePrimaryCtxRetain", 7000)]),
    ("cuDevicePrimaryCtxRelease", &[v("cuDevicePrimaryCtxRelease", 7000), v("cuDevicePrimaryCtxRelease_v2", 11000)]),
    ("cuDevicePrimaryCtxReset", &[v("cuDevicePrimaryCtxReset", 7000), v("cuDevicePrimaryCtxReset_v2", 11000)]),
    ("cuStreamSynchronize", &[v("cuStreamSynchronize", 2000), ptsz("cuStreamSynchronize_ptsz", 7000)]),
    ("cuCtxSynchronize", &[v("cuCtxSynchronize", 2000), v("cuCtxSynchronize_v2", 13000)]),
    ("cuEventSynchronize", &[v("cuEventSynchronize", 2000)]),
];

/// The symbol the driver resolves `name` to at `version` with `flags`;
/// `None` for a family the table does not list or a version before its first
/// variant.
pub fn choose(name: &str, version: i32, flags: u64) -> Option<&'static str> {
    let (_, variants) = FAMILIES.iter().find(|(base, _)| *base == name)?;
    let want_per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0;
    let has_per_thread = variants.iter().any(|v| v.per_thread);
    let per_thread = want_per_thread && has_per_thread;
    variants
        .iter()
        .filter(|v| v.since <= version && v.per_thread == per_thread)
        .max_by_key(|v| v.since)
        .map(|v| v.symbol)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use abi::cuda::{CU_GET_PROC_ADDRESS_DEFAULT, CU_GET_PROC_ADDRESS_LEGACY_STREAM};
    const PTSZ: u64 = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

    #[test]
    fn newest_variant_not_newer_than_the_request() {
        assert_eq!(choose("cuMemAlloc", 3020, 0), Some("cuMemAlloc_v2"));
        assert_eq!(choose("cuMemAlloc", 13000, 0), Some("cuMemAlloc_v2"));
        assert_eq!(choose("cuMemAlloc", 2000, 0), Some("cuMemAlloc"));
        assert_eq!(choose("cuCtxCreate", 11040, 0), Some("cuCtxCreate_v3"));
        assert_eq!(choose("cuCtxCreate", 12040, 0), Some("cuCtxCreate_v3"));
        assert_eq!(choose("cuCtxCreate", 12050, 0), Some("cuCtxCreate_v4"));
        assert_eq!(choose("cuCtxDestroy", 4000, 0), Some("cuCtxDestroy_v2"));
        assert_eq!(choose("cuDevicePrimaryCtxRelease", 10020, 0), Some("cuDevicePrimaryCtxRelease"));
        assert_eq!(choose("cuDevicePrimaryCtxRelease", 11000, 0), Some("cuDevicePrimaryCtxRelease_v2"));
        assert_eq!(choose("cuGetProcAddress", 11030, 0), Some("cuGetProcAddress"));
        assert_eq!(choose("cuGetProcAddress", 12000, 0), Some("cuGetProcAddress_v2"));
    }

    #[test]
    fn too_old_or_unknown_is_none() {
        assert_eq!(choose("cuMemAllocAsync", 11010, 0), None);
        assert_eq!(choose("cuLaunchKernel", 12000, 0), None);
        assert_eq!(choose("cuMemAlloc_v2", 12000, 0), None);
    }

    #[test]
    fn per_thread_flag_picks_ptsz_where_it_exists() {
        assert_eq!(choose("cuMemAllocAsync", 11020, PTSZ), Some("cuMemAllocAsync_ptsz"));
        assert_eq!(choose("cuMemFreeAsync", 12000, PTSZ), Some("cuMemFreeAsync_ptsz"));
        assert_eq!(choose("cuMemAllocFromPoolAsync", 12000, PTSZ), Some("cuMemAllocFromPoolAsync_ptsz"));
        assert_eq!(choose("cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_DEFAULT), Some("cuMemAllocAsync"));
        assert_eq!(choose("cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM), Some("cuMemAllocAsync"));
        // No per-thread form: the flag changes nothing.
        assert_eq!(choose("cuMemAlloc", 12000, PTSZ), Some("cuMemAlloc_v2"));
    }

    #[test]
    fn every_hooked_cuda_symbol_is_reachable_through_the_table() {
        for name in crate::hooks::HOOKED {
            if name.starts_with("nvml") {
                continue;
            }
            let listed = FAMILIES.iter().any(|(_, vs)| vs.iter().any(|v| v.symbol == *name));
            assert!(listed, "{name} is hooked but no family lists it");
        }
    }

    /// `(base name, version, per-thread)` of every `PFN_<name>_v<NNNN>[_ptsz|_ptds]`
    /// typedef in `cudaTypedefs.h`.
    fn header_variants() -> Vec<(String, i32, bool)> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.deps/include/cudaTypedefs.h");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run scripts/setup.sh to install NVIDIA's headers", path.display()));
        let mut found = Vec::new();
        for piece in text.split("PFN_").skip(1) {
            let word: String = piece.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            let (word, per_thread) = match word.strip_suffix("_ptsz").or_else(|| word.strip_suffix("_ptds")) {
                Some(stem) => (stem.to_string(), true),
                None => (word, false),
            };
            let Some((base, version)) = word.rsplit_once("_v") else { continue };
            let Ok(version) = version.parse::<i32>() else { continue };
            if !found.contains(&(base.to_string(), version, per_thread)) {
                found.push((base.to_string(), version, per_thread));
            }
        }
        found
    }

    /// The symbol `cuda.h`'s `#define` maps the API name `base` to (what a
    /// program compiled against it calls, so the newest variant), and
    /// whether that define has a per-thread (`__CUDA_API_PTSZ`) form; `None`
    /// without a define.
    fn header_define(cuda_h: &str, base: &str) -> Option<(String, bool)> {
        for line in cuda_h.lines() {
            let mut words = line.split_whitespace();
            if words.next() != Some("#define") || words.next() != Some(base) {
                continue;
            }
            let target: String = words.collect();
            if let Some(inner) = target.strip_prefix("__CUDA_API_PTSZ(").and_then(|t| t.strip_suffix(')')) {
                return Some((inner.to_string(), true));
            }
            return Some((target, false));
        }
        None
    }

    /// The version number of a variant's name: 1 for `base`, N for `base_vN`.
    fn name_version(base: &str, symbol: &str) -> Option<u32> {
        let rest = symbol.strip_prefix(base)?;
        if rest.is_empty() {
            return Some(1);
        }
        rest.strip_prefix("_v")?.parse().ok()
    }

    #[test]
    fn the_symbol_names_match_cuda_h() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.deps/include/cuda.h");
        let cuda_h = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run scripts/setup.sh to install NVIDIA's headers", path.display()));
        for (base, variants) in FAMILIES {
            let define = header_define(&cuda_h, base);
            let mut plain: Vec<&Variant> = variants.iter().filter(|v| !v.per_thread).collect();
            plain.sort_by_key(|v| v.since);
            // Older names only: later variants carry higher `_vN` numbers.
            let numbers: Vec<Option<u32>> = plain.iter().map(|v| name_version(base, v.symbol)).collect();
            assert!(numbers.iter().all(Option::is_some), "{base}: {plain:?} are not all named {base} or {base}_vN");
            assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{base}: names {plain:?} do not rise with their versions");
            let newest = plain.last().map(|v| v.symbol).unwrap_or_default();
            // Every name is declared as itself, except the one the define
            // maps the API name to (declared under the API name).
            for variant in &plain {
                if define.as_ref().is_some_and(|(target, _)| target == variant.symbol) {
                    continue;
                }
                let declared = format!("CUDAAPI {}(", variant.symbol);
                assert!(cuda_h.contains(&declared), "{base}: {} is not declared in cuda.h", variant.symbol);
            }
            if let Some((target, _)) = &define {
                assert_eq!(newest, target, "{base}: cuda.h maps the API name to {target}, the table's newest is {newest}");
            }
            let per_thread: Vec<&str> = variants.iter().filter(|v| v.per_thread).map(|v| v.symbol).collect();
            let expected: Vec<String> = match &define {
                Some((target, true)) => vec![format!("{target}_ptsz")],
                _ => Vec::new(),
            };
            assert_eq!(per_thread, expected, "{base}: per-thread variants differ from cuda.h's");
        }
    }

    #[test]
    fn the_version_table_matches_cuda_typedefs_h() {
        let header = header_variants();
        assert!(header.len() > 500, "cudaTypedefs.h names only {} variants", header.len());
        for (base, variants) in FAMILIES {
            let mut ours: Vec<(i32, bool)> = variants.iter().map(|v| (v.since, v.per_thread)).collect();
            let mut theirs: Vec<(i32, bool)> =
                header.iter().filter(|(b, _, _)| b == base).map(|(_, v, p)| (*v, *p)).collect();
            ours.sort();
            theirs.sort();
            assert_eq!(ours, theirs, "{base}: the shim's variants (version, per-thread) differ from cudaTypedefs.h");
        }
    }
}
