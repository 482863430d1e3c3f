//! How the driver maps (name, requested version, flags) to a symbol, for the
//! functions whose families the shim hooks.
//!
//! Transcribed from `cudaTypedefs.h`: each `PFN_<name>_v<version>` is one
//! variant, available from that CUDA version on. `cuGetProcAddress` returns
//! the newest variant whose version is at most the requested one; with
//! `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` it returns the `_ptsz`
//! variant where one exists.
//!
//! The hooked variants come from the hook list
//! (`hooks::hooked_functions!`), where each entry names its family and
//! version. Variants of those families the shim does not hook (the 32-bit
//! `cuMemAlloc` of CUDA 2.0, say) are listed here, in [`UNHOOKED_VARIANTS`], so
//! that asking for them passes the driver's answer through untouched. Unit
//! tests hold every family, both lists together, to `cudaTypedefs.h` and
//! `cuda.h`.

use abi::cuda::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

/// One symbol of a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    /// The API name (`cuMemAlloc` for `cuMemAlloc_v2`).
    pub family: &'static str,
    pub symbol: &'static str,
    /// The CUDA version it appeared in (`1000 × major + 10 × minor`).
    pub since: i32,
    /// A per-thread default-stream (`_ptsz`) form.
    pub per_thread: bool,
}

/// `per_thread` in a hook list entry.
macro_rules! per_thread {
    () => {
        false
    };
    (per_thread) => {
        true
    };
}

/// Builds [`HOOKED_VARIANTS`] from the hook list.
macro_rules! version_table {
    (
        own {}
        cuda { $($module:ident::$name:ident($($arg:ty),*) -> $ret:ty => $family:ident since $since:literal $($per_thread:ident)?;)* }
        nvml { $($nvml:tt)* }
    ) => {
        /// The variants the shim hooks.
        pub static HOOKED_VARIANTS: &[Variant] = &[
            $(Variant { family: stringify!($family), symbol: stringify!($name), since: $since, per_thread: per_thread!($($per_thread)?) },)*
        ];
    };
}

crate::hooks::hooked_functions!(version_table {});

const fn v(family: &'static str, symbol: &'static str, since: i32) -> Variant {
    Variant { family, symbol, since, per_thread: false }
}

/// The variants of hooked families that the shim does not hook.
pub static UNHOOKED_VARIANTS: &[Variant] = &[
    v("cuMemAlloc", "cuMemAlloc", 2000),
    v("cuMemAllocPitch", "cuMemAllocPitch", 2000),
    v("cuArrayCreate", "cuArrayCreate", 2000),
    v("cuArray3DCreate", "cuArray3DCreate", 2000),
    v("cuMemFree", "cuMemFree", 2000),
    v("cuMemGetInfo", "cuMemGetInfo", 2000),
    v("cuDeviceTotalMem", "cuDeviceTotalMem", 2000),
    v("cuMemcpyDtoH", "cuMemcpyDtoH", 2000),
];

/// Every variant the table knows, hooked or not.
pub fn variants() -> impl Iterator<Item = &'static Variant> {
    HOOKED_VARIANTS.iter().chain(UNHOOKED_VARIANTS)
}

/// The symbol the driver resolves `name` to at `version` with `flags`;
/// `None` for a family the table does not list or a version before its first
/// variant.
pub fn choose(name: &str, version: i32, flags: u64) -> Option<&'static str> {
    let family = || variants().filter(move |v| v.family == name);
    let want_per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0;
    let has_per_thread = family().any(|v| v.per_thread);
    let per_thread = want_per_thread && has_per_thread;
    family().filter(|v| v.since <= version && v.per_thread == per_thread).max_by_key(|v| v.since).map(|v| v.symbol)
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
        assert_eq!(choose("cuLaunchKernelEx", 11050, 0), None);
        assert_eq!(choose("cuLaunchHostFunc", 12000, 0), None);
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
        assert_eq!(choose("cuLaunchCooperativeKernelMultiDevice", 12000, PTSZ), Some("cuLaunchCooperativeKernelMultiDevice"));
        assert_eq!(choose("cuStreamDestroy", 12000, PTSZ), Some("cuStreamDestroy_v2"));
    }

    #[test]
    fn every_launch_route_resolves_to_a_hooked_variant() {
        for (family, since, plain, per_thread) in [
            ("cuLaunchKernel", 4000, "cuLaunchKernel", "cuLaunchKernel_ptsz"),
            ("cuLaunchKernelEx", 11060, "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"),
            ("cuLaunchCooperativeKernel", 9000, "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz"),
            ("cuGraphLaunch", 10000, "cuGraphLaunch", "cuGraphLaunch_ptsz"),
        ] {
            assert_eq!(choose(family, since, 0), Some(plain), "{family} {since}");
            for version in [12000, 13050] {
                assert_eq!(choose(family, version, 0), Some(plain), "{family} {version}");
                assert_eq!(choose(family, version, PTSZ), Some(per_thread), "{family} {version}");
                assert!(HOOKED_VARIANTS.iter().any(|v| v.symbol == plain) && HOOKED_VARIANTS.iter().any(|v| v.symbol == per_thread));
            }
            assert_eq!(choose(family, since - 10, 0), None, "{family} is not older than {since}");
        }
        for family in ["cuLaunch", "cuLaunchGrid", "cuLaunchGridAsync", "cuLaunchCooperativeKernelMultiDevice"] {
            assert!(HOOKED_VARIANTS.iter().any(|v| v.symbol == family), "{family}");
        }
    }

    #[test]
    fn every_hooked_cuda_symbol_is_reachable_through_the_table() {
        for name in crate::hooks::HOOKED {
            if name.starts_with("nvml") {
                continue;
            }
            let listed = variants().any(|v| v.symbol == *name);
            assert!(listed, "{name} is hooked but no family lists it");
        }
        // And the driver's rule picks each hooked variant for its family at
        // its own version.
        for variant in HOOKED_VARIANTS {
            let flags = if variant.per_thread { PTSZ } else { 0 };
            assert_eq!(choose(variant.family, variant.since, flags), Some(variant.symbol), "{variant:?}");
        }
    }

    #[test]
    fn each_symbol_is_listed_once() {
        let all: Vec<&str> = variants().map(|v| v.symbol).collect();
        for symbol in &all {
            assert_eq!(all.iter().filter(|s| *s == symbol).count(), 1, "{symbol} is listed more than once");
        }
    }

    /// The table by family, in the order the families first appear.
    fn families() -> Vec<(&'static str, Vec<Variant>)> {
        let mut grouped: Vec<(&'static str, Vec<Variant>)> = Vec::new();
        for variant in variants() {
            match grouped.iter_mut().find(|(family, _)| *family == variant.family) {
                Some((_, members)) => members.push(*variant),
                None => grouped.push((variant.family, vec![*variant])),
            }
        }
        grouped
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
    /// the suffix of its per-thread form when the define has one: `_ptsz`
    /// (`__CUDA_API_PTSZ`), or `_ptds` for the synchronous copies
    /// (`__CUDA_API_PTDS`); `None` without a define.
    fn header_define(cuda_h: &str, base: &str) -> Option<(String, Option<&'static str>)> {
        for line in cuda_h.lines() {
            let mut words = line.split_whitespace();
            if words.next() != Some("#define") || words.next() != Some(base) {
                continue;
            }
            let target: String = words.collect();
            for (wrapper, suffix) in [("__CUDA_API_PTSZ(", "_ptsz"), ("__CUDA_API_PTDS(", "_ptds")] {
                if let Some(inner) = target.strip_prefix(wrapper).and_then(|t| t.strip_suffix(')')) {
                    return Some((inner.to_string(), Some(suffix)));
                }
            }
            return Some((target, None));
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
        for (base, variants) in &families() {
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
                Some((target, Some(suffix))) => vec![format!("{target}{suffix}")],
                _ => Vec::new(),
            };
            assert_eq!(per_thread, expected, "{base}: per-thread variants differ from cuda.h's");
        }
    }

    #[test]
    fn the_version_table_matches_cuda_typedefs_h() {
        let header = header_variants();
        assert!(header.len() > 500, "cudaTypedefs.h names only {} variants", header.len());
        for (base, variants) in &families() {
            let mut ours: Vec<(i32, bool)> = variants.iter().map(|v| (v.since, v.per_thread)).collect();
            let mut theirs: Vec<(i32, bool)> = header.iter().filter(|(b, _, _)| b == base).map(|(_, v, p)| (*v, *p)).collect();
            ours.sort();
            theirs.sort();
            assert_eq!(ours, theirs, "{base}: the shim's variants (version, per-thread) differ from cudaTypedefs.h");
        }
    }
}
