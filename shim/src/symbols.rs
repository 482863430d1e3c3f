//! Finding the real driver's entry points in one pass over its own symbol
//! table, without a `dlsym` per name.
//!
//! The shim resolves some eighty driver functions when it starts (`real`).
//! Through `dlsym` each costs about 900 instructions (its error catching,
//! the scope walk, the loader's lookup), some 70,000 in every process. Here
//! each is one GNU hash lookup in the library's own table: the name's
//! hash, the Bloom filter, the bucket's chain, one string comparison.
//!
//! What it answers is what `dlsym(handle, name)` answers, or nothing:
//! [`Found::AskDlsym`] wherever the two could differ, and the caller then
//! asks `dlsym`. That is a name the library does not define itself (`dlsym`
//! also searches its dependencies), a versioned definition (the loader's
//! rules for an unversioned lookup of one are its own), an indirect
//! function (`dlsym` runs its resolver) and a library whose tables cannot be
//! read here. A defined, unversioned function or object is the library's
//! load address plus its value, as the loader computes it.

use core::ffi::{c_int, c_void, CStr};

const DT_NULL: i64 = 0;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;
const DT_VERSYM: i64 = 0x6fff_fff0;
const STT_OBJECT: u8 = 1;
const STT_FUNC: u8 = 2;
const SHN_UNDEF: u16 = 0;
/// More dynamic entries than any library has: a bound on a walk that
/// misses its terminator.
const MAX_DYNAMIC_ENTRIES: usize = 4096;

/// The head of glibc's `struct link_map` (`<link.h>`): the public fields.
#[repr(C)]
struct LinkMap {
    l_addr: usize,
    l_name: *const core::ffi::c_char,
    l_ld: *const Dyn,
    l_next: *const LinkMap,
    l_prev: *const LinkMap,
}

/// `Elf64_Dyn`.
#[repr(C)]
struct Dyn {
    d_tag: i64,
    d_val: u64,
}

/// `Elf64_Sym`.
#[repr(C)]
struct Sym {
    st_name: u32,
    st_info: u8,
    st_other: u8,
    st_shndx: u16,
    st_value: u64,
    st_size: u64,
}

/// What the table says of a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// The library's own unversioned definition.
    At(*mut c_void),
    /// Only `dlsym` can say (see the module docs).
    AskDlsym,
}

/// A loaded library's dynamic symbol table and GNU hash table.
pub struct Table {
    base: usize,
    symtab: *const Sym,
    strtab: *const u8,
    versym: *const u16,
    buckets: u32,
    symoffset: u32,
    bloom_words: u32,
    bloom_shift: u32,
    bloom: *const u64,
    bucket: *const u32,
    chain: *const u32,
}

impl Table {
    /// The tables of the library `handle` (from `dlopen`); `None` when the
    /// loader does not say where it is or it has no GNU hash table.
    pub fn of(handle: *mut c_void) -> Option<Table> {
        // The layouts here are ELF64's (a Bloom word is 64 bits there).
        if cfg!(not(target_pointer_width = "64")) {
            return None;
        }
        let mut map: *const LinkMap = core::ptr::null();
        // SAFETY: RTLD_DI_LINKMAP writes one pointer to `map`, a live local;
        // `handle` came from dlopen.
        let r = unsafe { libc::dlinfo(handle, libc::RTLD_DI_LINKMAP as c_int, (&mut map as *mut *const LinkMap).cast()) };
        if r != 0 || map.is_null() {
            return None;
        }
        // SAFETY: the loader's link map of a library that stays loaded (the
        // shim never closes it); only its public head is read.
        let map = unsafe { &*map };
        let base = map.l_addr;
        // glibc relocates the dynamic section's addresses in place where it
        // can write it (x86-64) and leaves them relative elsewhere.
        let address = |value: u64| {
            let value = value as usize;
            if value < base {
                value.wrapping_add(base)
            } else {
                value
            }
        };
        let (mut hash, mut symtab, mut strtab, mut versym) = (0, 0, 0, 0);
        let mut entry = map.l_ld;
        let mut terminated = false;
        for _ in 0..MAX_DYNAMIC_ENTRIES {
            if entry.is_null() {
                return None;
            }
            // SAFETY: `entry` walks the library's mapped dynamic section up
            // to its DT_NULL terminator.
            let (tag, value) = unsafe { ((*entry).d_tag, (*entry).d_val) };
            match tag {
                DT_NULL => {
                    terminated = true;
                    break;
                }
                DT_GNU_HASH => hash = address(value),
                DT_SYMTAB => symtab = address(value),
                DT_STRTAB => strtab = address(value),
                DT_VERSYM => versym = address(value),
                _ => {}
            }
            // SAFETY: still inside the section: this entry was not DT_NULL.
            entry = unsafe { entry.add(1) };
        }
        if !terminated || hash == 0 || symtab == 0 || strtab == 0 {
            return None;
        }
        let header = hash as *const u32;
        // SAFETY: the GNU hash table starts with four 32-bit words.
        let (buckets, symoffset, bloom_words, bloom_shift) = unsafe { (*header, *header.add(1), *header.add(2), *header.add(3)) };
        if buckets == 0 || bloom_words == 0 {
            return None;
        }
        // SAFETY: the Bloom words follow the header, the buckets the Bloom
        // words and the chains the buckets, in the mapped table.
        let (bloom, bucket, chain) = unsafe {
            let bloom = header.add(4) as *const u64;
            let bucket = bloom.add(bloom_words as usize) as *const u32;
            (bloom, bucket, bucket.add(buckets as usize))
        };
        Some(Table {
            base,
            symtab: symtab as *const Sym,
            strtab: strtab as *const u8,
            versym: versym as *const u16,
            buckets,
            symoffset,
            bloom_words,
            bloom_shift,
            bloom,
            bucket,
            chain,
        })
    }

    /// What the library itself defines under `name`.
    #[cfg(test)]
    pub fn find(&self, name: &CStr) -> Found {
        self.find_hashed(name, gnu_hash(name.to_bytes()))
    }

    /// What the library itself defines under `name`, whose [`gnu_hash`] is
    /// `hash` (computed when the shim is compiled, for the names it knows).
    pub fn find_hashed(&self, name: &CStr, hash: u32) -> Found {
        let wanted = name.to_bytes();
        let bits = u64::BITS;
        // SAFETY: the index is below the Bloom filter's word count.
        let word = unsafe { *self.bloom.add(((hash / bits) % self.bloom_words) as usize) };
        let mask = (1u64 << (hash % bits)) | (1u64 << ((hash >> self.bloom_shift) % bits));
        if word & mask != mask {
            return Found::AskDlsym;
        }
        // SAFETY: the index is below the bucket count.
        let mut index = unsafe { *self.bucket.add((hash % self.buckets) as usize) };
        if index < self.symoffset {
            return Found::AskDlsym;
        }
        loop {
            // SAFETY: a bucket names a symbol at or past `symoffset`, and a
            // chain runs on until an entry with its low bit set.
            let link = unsafe { *self.chain.add((index - self.symoffset) as usize) };
            if link | 1 == hash | 1 {
                // SAFETY: `index` is a symbol of the table (its chain entry
                // exists).
                let symbol = unsafe { &*self.symtab.add(index as usize) };
                if self.is_named(symbol, wanted) {
                    return self.definition(index, symbol);
                }
            }
            if link & 1 == 1 {
                return Found::AskDlsym;
            }
            index += 1;
        }
    }

    /// Whether `symbol`'s name is `wanted` (which holds no NUL), read up to
    /// the first byte that differs: no length is counted first.
    fn is_named(&self, symbol: &Sym, wanted: &[u8]) -> bool {
        // SAFETY: the name is a NUL-terminated string of the string table;
        // the walk stops at the first byte that differs, which is at the
        // latest its NUL (no byte of `wanted` is NUL).
        unsafe {
            let name = self.strtab.add(symbol.st_name as usize);
            for (i, &byte) in wanted.iter().enumerate() {
                if *name.add(i) != byte {
                    return false;
                }
            }
            *name.add(wanted.len()) == 0
        }
    }

    /// The address of symbol `index` when it is a plain definition.
    fn definition(&self, index: u32, symbol: &Sym) -> Found {
        let kind = symbol.st_info & 0xf;
        if symbol.st_shndx == SHN_UNDEF || symbol.st_value == 0 || !(kind == STT_FUNC || kind == STT_OBJECT) {
            return Found::AskDlsym;
        }
        if !self.versym.is_null() {
            // SAFETY: the version table has one entry per symbol.
            let version = unsafe { *self.versym.add(index as usize) } & 0x7fff;
            // 0 and 1: local and global (unversioned).
            if version > 1 {
                return Found::AskDlsym;
            }
        }
        Found::At(self.base.wrapping_add(symbol.st_value as usize) as *mut c_void)
    }
}

/// The GNU hash of a symbol name (`dl_new_hash`).
pub const fn gnu_hash(name: &[u8]) -> u32 {
    let mut hash = 5381u32;
    let mut rest = name;
    while let [byte, tail @ ..] = rest {
        hash = hash.wrapping_mul(33).wrapping_add(*byte as u32);
        rest = tail;
    }
    hash
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use std::ffi::CString;

    #[test]
    fn hash_matches_the_loaders() {
        // Values from the GNU hash's definition (h = h * 33 + c from 5381).
        assert_eq!(gnu_hash(b""), 5381);
        assert_eq!(gnu_hash(b"a"), 177670);
        assert_eq!(gnu_hash(b"printf"), 0x156b_2bb8);
    }

    /// The test library's C source: `names` as functions returning their
    /// index, an object, an indirect function, a function that refers to
    /// libc's `getenv`, and `extra`.
    fn library_source(names: &[String], extra: &str) -> String {
        let mut source = String::from("#include <stdlib.h>\nint data_object = 7;\n");
        for (i, name) in names.iter().enumerate() {
            source.push_str(&format!("int {name}(void) {{ return {i}; }}\n"));
        }
        source.push_str("static int chosen(void) { return 1; }\n");
        source.push_str("static void *pick(void) { return (void *)chosen; }\n");
        source.push_str("int indirect(void) __attribute__((ifunc(\"pick\")));\n");
        source.push_str("int uses_getenv(void) { return getenv(\"X\") != 0; }\n");
        source.push_str(extra);
        source
    }

    /// Builds `source` with gcc in `dir` (with `version_script`, if any)
    /// and opens it.
    fn build_library(dir: &std::path::Path, source: &str, version_script: Option<&str>) -> *mut core::ffi::c_void {
        std::fs::create_dir_all(dir).unwrap();
        let c = dir.join("lib.c");
        std::fs::write(&c, source).unwrap();
        let so = dir.join("libsymbols.so");
        let mut gcc = std::process::Command::new("gcc");
        gcc.args(["-shared", "-fPIC", "-O1", "-o"]).arg(&so).arg(&c);
        if let Some(script) = version_script {
            let map = dir.join("lib.map");
            std::fs::write(&map, script).unwrap();
            gcc.arg(format!("-Wl,--version-script={}", map.display()));
        }
        assert!(gcc.status().expect("cannot run gcc").success(), "gcc failed");
        let path = CString::new(so.to_str().unwrap()).unwrap();
        let handle = crate::ffi::open_library(&path);
        assert!(!handle.is_null(), "dlopen failed");
        handle
    }

    fn function_names() -> Vec<String> {
        (0..300).map(|i| format!("cuFunction{i}_v{}", i % 4)).collect()
    }

    /// A library built here with gcc: unversioned functions and an object,
    /// many names (so chains hold several), an undefined reference, an
    /// indirect function and a versioned symbol. The table answers exactly
    /// what `dlsym` does for every name it answers, and asks `dlsym` for the
    /// rest.
    #[test]
    fn answers_what_dlsym_answers() {
        let dir = std::env::temp_dir().join(format!("gpuslice-symbols-test-{}", std::process::id()));
        let names = function_names();
        let source = library_source(&names, "int versioned(void) { return 3; }\n");
        let handle = build_library(&dir, &source, Some("V1 { global: versioned; };\nV0 { global: *; };\n"));
        // Versioned throughout: every answer is `dlsym`'s.
        let table = Table::of(handle).expect("no table");
        let mut found = 0;
        for name in names.iter().map(String::as_str).chain(["data_object", "indirect", "uses_getenv", "versioned", "getenv", "absent"]) {
            let cname = CString::new(name).unwrap();
            let real = crate::ffi::lookup(handle, &cname);
            match table.find(&cname) {
                Found::At(address) => {
                    found += 1;
                    assert_eq!(address, real, "{name}");
                }
                Found::AskDlsym => {}
            }
        }
        // The version script versions every symbol, so every answer is dlsym's.
        assert_eq!(found, 0, "a versioned library's symbols were answered without dlsym");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unversioned_library_is_answered_in_full() {
        let dir = std::env::temp_dir().join(format!("gpuslice-symbols-unversioned-{}", std::process::id()));
        let names = function_names();
        let handle = build_library(&dir, &library_source(&names, ""), None);
        let table = Table::of(handle).expect("no table");
        for name in names.iter().map(String::as_str).chain(["data_object", "uses_getenv"]) {
            let cname = CString::new(name).unwrap();
            let real = crate::ffi::lookup(handle, &cname);
            assert!(!real.is_null(), "{name}");
            assert_eq!(table.find(&cname), Found::At(real), "{name}");
        }
        // Defined elsewhere (libc), an indirect function, absent: dlsym's.
        for name in ["getenv", "indirect", "absent", "cuFunction300_v0"] {
            assert_eq!(table.find(&CString::new(name).unwrap()), Found::AskDlsym, "{name}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
