//! Module images: which kernels a PTX, cubin or fatbin image holds.
//!
//! simgpu runs no device code, but it answers as a driver does about the
//! kernels an image defines: `cuModuleGetFunction` and `cuLibraryGetKernel`
//! find the names listed here and refuse others with `CUDA_ERROR_NOT_FOUND`.
//! Supported:
//! - **PTX** (text): every `.entry <name>` (with `.visible`/`.weak` or not).
//! - **cubin** (64-bit little-endian ELF, as `nvcc -cubin`, NVRTC and
//!   nvJitLink write it): one kernel per `.nv.info.<name>` section; an image
//!   without any lists the `FUNC` symbols that live in `.text.<name>`.
//! - **fatbin** (`0xBA55ED50` container, also behind the runtime's
//!   `0x466243B1` wrapper): the kernels of the entries a driver would load
//!   on simgpu's sm_90 ([`DEVICE_ARCH`]): its sm_90 cubins, else its newest
//!   PTX for sm_90 or older, else all entries. Entries are decompressed
//!   first when their header says Zstandard (CUDA 13's default) or LZ4; one
//!   that does not decompress gives the image [`Kernels::Any`].
//!
//! Any other text (the tests' `"any image"`) has [`Kernels::Any`]: every
//! name resolves, and a kernel's duration comes from its name
//! ([`crate::exports::launch`]). A binary image of no known format is
//! refused with `CUDA_ERROR_INVALID_IMAGE`, as a driver refuses it.
//!
//! Device variables (`__device__`, `__constant__`) are listed the same way,
//! with their sizes, for `cuModuleGetGlobal`/`cuLibraryGetGlobal`
//! ([`globals`]): PTX module-scope `.global`/`.const` declarations, and a
//! cubin's `OBJECT` symbols in its `.nv.global*`/`.nv.constant*` sections.
//!
//! Parsing is on byte slices with checked arithmetic: a truncated or hostile
//! image is an error, never a read past its end. Working out how long an
//! image behind a bare pointer is (`cuModuleLoadData` passes no size) is
//! [`image_len`]'s job, from the format's own headers.

use std::collections::{BTreeMap, BTreeSet};

/// The kernels of an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kernels {
    /// Exactly these names.
    Named(BTreeSet<String>),
    /// Unknown (free text, or a compressed fatbin entry): any name resolves.
    Any,
}

impl Kernels {
    pub fn contains(&self, name: &str) -> bool {
        match self {
            Kernels::Named(set) => set.contains(name),
            Kernels::Any => true,
        }
    }

    fn merge(self, other: Kernels) -> Kernels {
        match (self, other) {
            (Kernels::Named(mut a), Kernels::Named(b)) => {
                a.extend(b);
                Kernels::Named(a)
            }
            _ => Kernels::Any,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum ImageError {
    /// Not an image simgpu recognises, or a malformed one.
    Invalid(&'static str),
}

pub const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// `__fatBinC_Wrapper_t.magic`, the runtime's wrapper around a fatbin.
pub const FATBINC_WRAPPER_MAGIC: u32 = 0x4662_43B1;

const FATBIN_ENTRY_PTX: u16 = 1;
const FATBIN_ENTRY_ELF: u16 = 2;
const FATBIN_FLAG_COMPRESSED_LZ4: u64 = 0x2000;
const FATBIN_FLAG_COMPRESSED_ZSTD: u64 = 0x8000;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// The kernels of a complete image.
pub fn kernels(image: &[u8]) -> Result<Kernels, ImageError> {
    contents(image).map(|c| c.kernels)
}

/// Text: printable ASCII or whitespace up to the first NUL.
fn looks_like_text(image: &[u8]) -> bool {
    let text = image.split(|&b| b == 0).next().unwrap_or_default();
    !text.is_empty() && text.iter().all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace())
}

/// PTX `.entry` names. Text without `.version` or `.entry` is not PTX: any
/// name resolves.
pub fn ptx_kernels(text: &[u8]) -> Kernels {
    let text = text.split(|&b| b == 0).next().unwrap_or_default();
    let text = String::from_utf8_lossy(text);
    let mut names = BTreeSet::new();
    let mut is_ptx = false;
    let mut tokens = text.split(|c: char| c.is_whitespace() || c == '(' || c == '{').filter(|t| !t.is_empty());
    while let Some(token) = tokens.next() {
        match token {
            ".version" | ".target" => is_ptx = true,
            ".entry" => {
                is_ptx = true;
                if let Some(name) = tokens.next() {
                    names.insert(name.to_string());
                }
            }
            _ => {}
        }
    }
    if is_ptx {
        Kernels::Named(names)
    } else {
        Kernels::Any
    }
}

/// One ELF64 section header's fields that matter here.
struct Section {
    name_offset: u32,
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
    entry_size: u64,
}

const SHT_SYMTAB: u32 = 2;
const STT_FUNC: u8 = 2;

fn elf_sections(elf: &[u8]) -> Result<Vec<Section>, ImageError> {
    let bad = ImageError::Invalid("truncated or malformed ELF image");
    if elf.get(4) != Some(&2) || elf.get(5) != Some(&1) {
        return Err(ImageError::Invalid("only 64-bit little-endian ELF images are supported"));
    }
    let shoff = u64_at(elf, 0x28).ok_or(ImageError::Invalid("truncated ELF header"))? as usize;
    let shentsize = u16_at(elf, 0x3a).ok_or(ImageError::Invalid("truncated ELF header"))? as usize;
    let shnum = u16_at(elf, 0x3c).ok_or(ImageError::Invalid("truncated ELF header"))? as usize;
    if shentsize < 0x40 {
        return Err(bad);
    }
    (0..shnum)
        .map(|i| {
            let at = shoff.checked_add(i.checked_mul(shentsize)?)?;
            Some(Section {
                name_offset: u32_at(elf, at)?,
                kind: u32_at(elf, at + 4)?,
                offset: u64_at(elf, at + 0x18)?,
                size: u64_at(elf, at + 0x20)?,
                link: u32_at(elf, at + 0x28)?,
                entry_size: u64_at(elf, at + 0x38)?,
            })
        })
        .collect::<Option<Vec<_>>>()
        .ok_or(bad)
}

fn section_bytes<'a>(elf: &'a [u8], s: &Section) -> Option<&'a [u8]> {
    let start = usize::try_from(s.offset).ok()?;
    elf.get(start..start.checked_add(usize::try_from(s.size).ok()?)?)
}

fn c_string_at(table: &[u8], at: usize) -> Option<&str> {
    let rest = table.get(at..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// Kernel names of a cubin.
pub fn elf_kernels(elf: &[u8]) -> Result<BTreeSet<String>, ImageError> {
    let bad = || ImageError::Invalid("truncated or malformed ELF image");
    let sections = elf_sections(elf)?;
    let shstrndx = u16_at(elf, 0x3e).ok_or_else(bad)? as usize;
    let names = sections.get(shstrndx).and_then(|s| section_bytes(elf, s)).ok_or_else(bad)?;
    let section_name = |s: &Section| c_string_at(names, s.name_offset as usize).unwrap_or("");

    let mut kernels: BTreeSet<String> =
        sections.iter().filter_map(|s| section_name(s).strip_prefix(".nv.info.")).filter(|n| !n.is_empty()).map(str::to_string).collect();
    if !kernels.is_empty() {
        return Ok(kernels);
    }
    for symtab in sections.iter().filter(|s| s.kind == SHT_SYMTAB) {
        let symbols = section_bytes(elf, symtab).ok_or_else(bad)?;
        let strings = sections.get(symtab.link as usize).and_then(|s| section_bytes(elf, s)).ok_or_else(bad)?;
        let entry = usize::try_from(symtab.entry_size).ok().filter(|&e| e >= 24).ok_or_else(bad)?;
        for sym in symbols.chunks_exact(entry) {
            let (Some(name_at), Some(&info), Some(shndx)) = (u32_at(sym, 0), sym.get(4), u16_at(sym, 6)) else { continue };
            if info & 0xf != STT_FUNC {
                continue;
            }
            let Some(name) = c_string_at(strings, name_at as usize) else { continue };
            let in_own_text = sections.get(shndx as usize).map(section_name).and_then(|s| s.strip_prefix(".text.")) == Some(name);
            if in_own_text && !name.is_empty() {
                kernels.insert(name.to_string());
            }
        }
    }
    Ok(kernels)
}

/// One entry of a fatbin, as stored.
struct FatbinEntry<'a> {
    kind: u16,
    /// The architecture it is for (`90`: sm_90 code, or compute_90 PTX).
    arch: u32,
    flags: u64,
    stored: &'a [u8],
    compressed_bytes: u32,
    decompressed_bytes: u64,
}

/// Largest decompressed entry simgpu accepts: a bound on what a hostile
/// header can make it allocate.
const MAX_ENTRY_BYTES: u64 = 1 << 30;

/// The device architecture simgpu presents (compute capability 9.0, as
/// `cuDeviceGetAttribute` reports), which picks a fatbin's entries.
pub const DEVICE_ARCH: u32 = 90;

impl<'a> FatbinEntry<'a> {
    /// The payload, decompressed (Zstandard with ruzstd, LZ4 with
    /// [`lz4_block`]), or `None` when it does not decompress.
    fn payload(&self) -> Option<std::borrow::Cow<'a, [u8]>> {
        if self.flags & (FATBIN_FLAG_COMPRESSED_ZSTD | FATBIN_FLAG_COMPRESSED_LZ4) == 0 {
            return Some(std::borrow::Cow::Borrowed(self.stored));
        }
        let compressed = self.stored.get(..self.compressed_bytes as usize)?;
        let size = usize::try_from(self.decompressed_bytes).ok().filter(|&n| n as u64 <= MAX_ENTRY_BYTES)?;
        let decompressed = if self.flags & FATBIN_FLAG_COMPRESSED_ZSTD != 0 { zstd(compressed, size) } else { lz4_block(compressed, size) };
        decompressed.map(std::borrow::Cow::Owned)
    }
}

/// The entries of a fatbin container: its header (magic u32, version u16,
/// header size u16, body size u64), then entries of (kind u16, version
/// u16, header size u32, payload size u64, compressed size u32 at 16,
/// architecture u32 at 28, flags u64 at 40, decompressed size u64 at 56),
/// each payload following its header.
fn fatbin_entries(fatbin: &[u8]) -> Result<Vec<FatbinEntry<'_>>, ImageError> {
    let bad = || ImageError::Invalid("truncated or malformed fatbin");
    let header_size = u16_at(fatbin, 6).ok_or_else(bad)? as usize;
    let body_size = usize::try_from(u64_at(fatbin, 8).ok_or_else(bad)?).map_err(|_| bad())?;
    let body = fatbin.get(header_size..header_size.checked_add(body_size).ok_or_else(bad)?).ok_or_else(bad)?;
    let mut entries = Vec::new();
    let mut at = 0usize;
    while at < body.len() {
        let entry = &body[at..];
        let kind = u16_at(entry, 0).ok_or_else(bad)?;
        let entry_header = u32_at(entry, 4).ok_or_else(bad)? as usize;
        let payload_size = usize::try_from(u64_at(entry, 8).ok_or_else(bad)?).map_err(|_| bad())?;
        if entry_header == 0 {
            return Err(bad());
        }
        let stored = entry.get(entry_header..entry_header.checked_add(payload_size).ok_or_else(bad)?).ok_or_else(bad)?;
        entries.push(FatbinEntry {
            kind,
            arch: u32_at(entry, 28).unwrap_or(0),
            flags: u64_at(entry, 40).unwrap_or(0),
            stored,
            compressed_bytes: u32_at(entry, 16).unwrap_or(0),
            decompressed_bytes: u64_at(entry, 56).unwrap_or(0),
        });
        at = at.checked_add(entry_header + payload_size).ok_or_else(bad)?;
    }
    Ok(entries)
}

/// The entries a driver would load on this device: the cubins built for
/// its architecture; else the newest PTX not newer than it (the driver
/// would compile that); else, the image holding neither, all of them.
fn chosen_entries<'e, 'a>(entries: &'e [FatbinEntry<'a>]) -> Vec<&'e FatbinEntry<'a>> {
    let cubins: Vec<_> = entries.iter().filter(|e| e.kind == FATBIN_ENTRY_ELF && e.arch == DEVICE_ARCH).collect();
    if !cubins.is_empty() {
        return cubins;
    }
    let newest_ptx = entries.iter().filter(|e| e.kind == FATBIN_ENTRY_PTX && e.arch <= DEVICE_ARCH).map(|e| e.arch).max();
    if let Some(arch) = newest_ptx {
        return entries.iter().filter(|e| e.kind == FATBIN_ENTRY_PTX && e.arch == arch).collect();
    }
    entries.iter().collect()
}

/// A Zstandard-compressed payload of `size` bytes, or `None` if it does not decode.
fn zstd(compressed: &[u8], size: usize) -> Option<Vec<u8>> {
    let mut out = vec![0u8; size];
    let written = ruzstd::decoding::FrameDecoder::new().decode_all(compressed, &mut out).ok()?;
    out.truncate(written);
    Some(out)
}

/// An LZ4 block (no frame) of `size` bytes, or `None` if it is malformed:
/// sequences of a token (literal and match length nibbles, 15 meaning "more
/// bytes follow"), literals, a 2-byte offset and a match copied from the
/// output, the last sequence literals only.
fn lz4_block(input: &[u8], size: usize) -> Option<Vec<u8>> {
    fn length(input: &[u8], at: &mut usize, nibble: usize) -> Option<usize> {
        let mut n = nibble;
        if nibble == 15 {
            loop {
                let b = *input.get(*at)?;
                *at += 1;
                n = n.checked_add(b as usize)?;
                if b != 255 {
                    break;
                }
            }
        }
        Some(n)
    }
    let mut out = Vec::with_capacity(size);
    let mut at = 0usize;
    while at < input.len() {
        let token = input[at];
        at += 1;
        let literals = length(input, &mut at, (token >> 4) as usize)?;
        out.extend_from_slice(input.get(at..at.checked_add(literals)?)?);
        at += literals;
        if at == input.len() {
            break;
        }
        let offset = u16_at(input, at)? as usize;
        at += 2;
        let matched = length(input, &mut at, (token & 0xf) as usize)?.checked_add(4)?;
        if offset == 0 || offset > out.len() || out.len().checked_add(matched)? > size {
            return None;
        }
        let from = out.len() - offset;
        for i in 0..matched {
            out.push(out[from + i]);
        }
    }
    (out.len() <= size).then_some(out)
}

/// What a fatbin holds: the union of its chosen entries' contents
/// ([`chosen_entries`]); an entry that does not decompress makes its
/// kernels [`Kernels::Any`].
fn fatbin_contents(fatbin: &[u8]) -> Result<Contents, ImageError> {
    let entries = fatbin_entries(fatbin)?;
    let mut contents = Contents { kernels: Kernels::Named(BTreeSet::new()), globals: BTreeMap::new() };
    for entry in chosen_entries(&entries) {
        let found = match entry.payload() {
            None => Contents { kernels: Kernels::Any, globals: BTreeMap::new() },
            Some(p) if entry.kind == FATBIN_ENTRY_PTX => Contents { kernels: ptx_kernels(&p), globals: ptx_globals(&p) },
            Some(p) if entry.kind == FATBIN_ENTRY_ELF => Contents { kernels: Kernels::Named(elf_kernels(&p)?), globals: elf_globals(&p) },
            Some(_) => continue,
        };
        contents.kernels = contents.kernels.merge(found.kernels);
        contents.globals.extend(found.globals);
    }
    Ok(contents)
}

/// An image's kernels and device variables (name → size in bytes).
#[derive(Debug, PartialEq, Eq)]
pub struct Contents {
    pub kernels: Kernels,
    pub globals: BTreeMap<String, u64>,
}

/// Reads a complete image once for its kernels and variables.
pub fn contents(image: &[u8]) -> Result<Contents, ImageError> {
    if image.starts_with(&ELF_MAGIC) {
        return Ok(Contents { kernels: Kernels::Named(elf_kernels(image)?), globals: elf_globals(image) });
    }
    match u32_at(image, 0) {
        Some(FATBIN_MAGIC) => return fatbin_contents(image),
        Some(FATBINC_WRAPPER_MAGIC) => return Err(ImageError::Invalid("a fatbin wrapper must be resolved to its fatbin first")),
        _ => {}
    }
    if looks_like_text(image) {
        return Ok(Contents { kernels: ptx_kernels(image), globals: ptx_globals(image) });
    }
    Err(ImageError::Invalid("neither PTX, nor an ELF cubin, nor a fatbin"))
}

/// Device variables of a complete image (none when it cannot be read).
pub fn globals(image: &[u8]) -> BTreeMap<String, u64> {
    contents(image).map(|c| c.globals).unwrap_or_default()
}

/// Bytes of a PTX fundamental type (`.b8`, `.u32`, `.f64`, …).
fn ptx_type_bytes(token: &str) -> Option<u64> {
    let rest = token.strip_prefix('.')?;
    let (class, bits) = rest.split_at_checked(1)?;
    if !matches!(class, "b" | "u" | "s" | "f") {
        return None;
    }
    let bits: u64 = bits.parse().ok()?;
    matches!(bits, 8 | 16 | 32 | 64).then_some(bits / 8)
}

/// One module-scope declaration, `.visible .global .align 4 .b8 name[16]`
/// (initialiser already cut off): its name and size.
fn ptx_global_decl(decl: &str) -> Option<(String, u64)> {
    let tokens: Vec<&str> = decl.split_whitespace().collect();
    if !tokens.iter().any(|t| matches!(*t, ".global" | ".const")) || tokens.iter().any(|t| matches!(*t, ".extern" | ".entry" | ".func")) {
        return None;
    }
    let type_at = tokens.iter().position(|t| ptx_type_bytes(t).is_some())?;
    let element = ptx_type_bytes(tokens[type_at])?;
    let declarator: String = tokens.get(type_at + 1..)?.concat();
    let (name, dims) = declarator.split_once('[').map_or((declarator.as_str(), ""), |(n, d)| (n, d));
    if name.is_empty() {
        return None;
    }
    let mut size = element;
    for dim in dims.split('[').filter(|d| !d.is_empty()) {
        size = size.checked_mul(dim.trim_end_matches(']').trim().parse().ok()?)?;
    }
    Some((name.to_string(), size))
}

/// PTX's module-scope `.global` and `.const` variables (function bodies and
/// `.extern` declarations skipped).
pub fn ptx_globals(text: &[u8]) -> BTreeMap<String, u64> {
    let text = text.split(|&b| b == 0).next().unwrap_or_default();
    let text = String::from_utf8_lossy(text);
    let mut found = BTreeMap::new();
    let mut statement = String::new();
    let (mut body_depth, mut initialiser_depth) = (0usize, 0usize);
    for line in text.lines() {
        let line = line.split("//").next().unwrap_or_default();
        for c in line.chars().chain(std::iter::once('\n')) {
            if body_depth > 0 {
                match c {
                    '{' => body_depth += 1,
                    '}' => body_depth -= 1,
                    _ => {}
                }
                continue;
            }
            match c {
                '{' if statement.contains('=') => initialiser_depth += 1,
                '}' if initialiser_depth > 0 => initialiser_depth -= 1,
                '{' => {
                    body_depth = 1;
                    statement.clear();
                }
                ';' if initialiser_depth == 0 => {
                    let declaration = statement.split('=').next().unwrap_or_default();
                    found.extend(ptx_global_decl(declaration));
                    statement.clear();
                }
                _ if initialiser_depth == 0 => statement.push(c),
                _ => {}
            }
        }
    }
    found
}

const STT_OBJECT: u8 = 1;

/// A cubin's device variables: `OBJECT` symbols with a size in its
/// `.nv.global*` or `.nv.constant*` sections. Local ones count (NVRTC's
/// whole-program cubins bind every variable locally, and the driver finds
/// them); compiler-made names (`$…`, `.…`) do not.
pub fn elf_globals(elf: &[u8]) -> BTreeMap<String, u64> {
    let mut found = BTreeMap::new();
    let Ok(sections) = elf_sections(elf) else { return found };
    let Some(names) = u16_at(elf, 0x3e).and_then(|i| sections.get(i as usize)).and_then(|s| section_bytes(elf, s)) else { return found };
    let section_name = |s: &Section| c_string_at(names, s.name_offset as usize).unwrap_or("");
    for symtab in sections.iter().filter(|s| s.kind == SHT_SYMTAB) {
        let Some(symbols) = section_bytes(elf, symtab) else { continue };
        let Some(strings) = sections.get(symtab.link as usize).and_then(|s| section_bytes(elf, s)) else { continue };
        let Some(entry) = usize::try_from(symtab.entry_size).ok().filter(|&e| e >= 24) else { continue };
        for sym in symbols.chunks_exact(entry) {
            let (Some(name_at), Some(&info), Some(shndx), Some(size)) = (u32_at(sym, 0), sym.get(4), u16_at(sym, 6), u64_at(sym, 16))
            else {
                continue;
            };
            if info & 0xf != STT_OBJECT || size == 0 {
                continue;
            }
            let in_data = sections
                .get(shndx as usize)
                .map(section_name)
                .is_some_and(|s| s.starts_with(".nv.global") || s.starts_with(".nv.constant"));
            match c_string_at(strings, name_at as usize) {
                Some(name) if in_data && !name.is_empty() && !name.starts_with(['$', '.']) => {
                    found.insert(name.to_string(), size);
                }
                _ => {}
            }
        }
    }
    found
}

/// How many bytes the image at `image` spans, read from its own headers
/// (`cuModuleLoadData` passes a pointer, no size): an ELF image ends at its
/// last section or section table, a fatbin at its header's size, text at
/// its NUL.
///
/// # Safety
/// `image` must point to a complete image as cuda.h requires (an ELF or
/// fatbin image valid for the size its headers state, or NUL-terminated text).
pub unsafe fn image_len(image: *const u8) -> Result<usize, ImageError> {
    // SAFETY: forwarded contract.
    let head = unsafe { magic(image) };
    if head == ELF_MAGIC {
        // SAFETY: an ELF image starts with its 64-byte header.
        let header = unsafe { std::slice::from_raw_parts(image, 0x40) };
        if header[4] != 2 || header[5] != 1 {
            return Err(ImageError::Invalid("only 64-bit little-endian ELF images are supported"));
        }
        let shoff = u64_at(header, 0x28).unwrap_or(0) as usize;
        let shentsize = u16_at(header, 0x3a).unwrap_or(0) as usize;
        let shnum = u16_at(header, 0x3c).unwrap_or(0) as usize;
        let table_end =
            shentsize.checked_mul(shnum).and_then(|n| n.checked_add(shoff)).ok_or(ImageError::Invalid("malformed ELF header"))?;
        if table_end > 1 << 32 {
            return Err(ImageError::Invalid("ELF section table beyond 4 GiB"));
        }
        // SAFETY: the section header table lies within the image (its header says where).
        let table = unsafe { std::slice::from_raw_parts(image.add(shoff), table_end - shoff) };
        let mut end = table_end.max(0x40);
        for s in table.chunks_exact(shentsize.max(1)) {
            const SHT_NOBITS: u32 = 8;
            if u32_at(s, 4) == Some(SHT_NOBITS) {
                continue;
            }
            let section_end = u64_at(s, 0x18).zip(u64_at(s, 0x20)).and_then(|(o, n)| o.checked_add(n));
            end = end.max(section_end.and_then(|e| usize::try_from(e).ok()).ok_or(ImageError::Invalid("malformed ELF section"))?);
        }
        return Ok(end);
    }
    if u32::from_le_bytes(head) == FATBIN_MAGIC {
        // SAFETY: a fatbin starts with its 16-byte header.
        let header = unsafe { std::slice::from_raw_parts(image, 16) };
        let size = (u16_at(header, 6).unwrap_or(0) as u64).checked_add(u64_at(header, 8).unwrap_or(0));
        return size.and_then(|s| usize::try_from(s).ok()).filter(|&s| s <= 1 << 32).ok_or(ImageError::Invalid("malformed fatbin header"));
    }
    // SAFETY: anything else is read as NUL-terminated text.
    Ok(unsafe { std::ffi::CStr::from_ptr(image.cast()) }.to_bytes().len())
}

/// An image's first four bytes, read no further than a NUL among them (a
/// text image may be shorter than four bytes; no binary magic has a NUL).
///
/// # Safety
/// `image` points to an image: NUL-terminated text or a longer binary.
unsafe fn magic(image: *const u8) -> [u8; 4] {
    let mut head = [0u8; 4];
    for (i, byte) in head.iter_mut().enumerate() {
        // SAFETY: the bytes before this one were not NUL, so the image goes on.
        *byte = unsafe { image.add(i).read() };
        if *byte == 0 {
            break;
        }
    }
    head
}

/// The fatbin a runtime wrapper (`__fatBinC_Wrapper_t`: magic u32,
/// version u32, data pointer, …) points to, or `image` itself.
///
/// # Safety
/// `image` must point to an image or a wrapper as the runtime passes it.
pub unsafe fn unwrap_fatbinc(image: *const u8) -> *const u8 {
    // SAFETY: forwarded contract.
    if u32::from_le_bytes(unsafe { magic(image) }) == FATBINC_WRAPPER_MAGIC {
        // SAFETY: the wrapper holds the fatbin's address at offset 8.
        unsafe { (image.add(8) as *const *const u8).read_unaligned() }
    } else {
        image
    }
}

/// Reads the image behind `image` for its kernels and variables.
///
/// # Safety
/// As [`image_len`]; a runtime fatbin wrapper is followed to its fatbin.
pub unsafe fn contents_at(image: *const u8) -> Result<Contents, ImageError> {
    if image.is_null() {
        return Err(ImageError::Invalid("null image"));
    }
    // SAFETY: forwarded contract.
    let image = unsafe { unwrap_fatbinc(image) };
    if image.is_null() {
        return Err(ImageError::Invalid("fatbin wrapper without data"));
    }
    // SAFETY: forwarded contract.
    let len = unsafe { image_len(image) }?;
    // SAFETY: image_len measured the image from its own headers.
    contents(unsafe { std::slice::from_raw_parts(image, len) })
}

/// A PTX text declaring `names` as entries: what the linker hands back
/// (`cuLinkComplete`), which simgpu's loader reads like any PTX.
pub fn linked_ptx(names: &BTreeSet<String>, globals: &BTreeMap<String, u64>) -> Vec<u8> {
    let mut text =
        String::from("// linked by simgpu: entries and variables only, no code\n.version 8.0\n.target sm_90\n.address_size 64\n");
    for (name, size) in globals {
        text.push_str(&format!(".visible .global .align 8 .b8 {name}[{size}];\n"));
    }
    for name in names {
        text.push_str(&format!(".visible .entry {name}()\n{{\n\tret;\n}}\n"));
    }
    let mut bytes = text.into_bytes();
    bytes.push(0);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(names: &[&str]) -> Kernels {
        Kernels::Named(names.iter().map(|s| s.to_string()).collect())
    }

    const PTX: &str = "//\n.version 8.5\n.target sm_90\n.address_size 64\n\n.visible .entry _Z3addPfS_(\n\t.param .u64 a\n)\n{\n\tret;\n}\n.entry plain{ret;}\n.func helper() { ret; }\n";

    #[test]
    fn ptx_module_scope_variables_are_the_globals() {
        let ptx = ".version 8.5\n.target sm_90\n.address_size 64\n// .global .u32 in_comment;\n\
            .visible .global .align 4 .u32 counter;\n\
            .visible .const .align 8 .f64 table[4][2] = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0};\n\
            .global .align 1 .b8 bytes[3] = {1, 2, 3};\n\
            .extern .global .align 4 .u32 elsewhere;\n\
            .visible .entry k(.param .u64 p)\n{\n\t.reg .b32 %r<2>;\n\t.local .align 4 .b8 scratch[64];\n\tret;\n}\n";
        let expected: BTreeMap<String, u64> =
            [("bytes", 3), ("counter", 4), ("table", 64)].iter().map(|(n, s)| (n.to_string(), *s)).collect();
        assert_eq!(globals(ptx.as_bytes()), expected);
        assert!(globals(b"any image\0").is_empty());
    }

    #[test]
    fn ptx_entries_are_the_kernels() {
        assert_eq!(kernels(PTX.as_bytes()), Ok(named(&["_Z3addPfS_", "plain"])));
        assert_eq!(kernels(b"any image\0"), Ok(Kernels::Any));
        // SAFETY: NUL-terminated text shorter than a magic number.
        assert_eq!(unsafe { contents_at(c"ab".as_ptr().cast()) }.map(|c| c.kernels), Ok(Kernels::Any));
        assert_eq!(kernels(b".version 8.0\n.target sm_90\n"), Ok(named(&[])));
        assert!(kernels(&[1, 2, 3, 4, 0xff]).is_err());
    }

    /// A minimal ELF64 with the given section names (and a .shstrtab).
    fn elf_with_sections(names: &[&str]) -> Vec<u8> {
        let mut shstr = vec![0u8];
        let mut offsets = Vec::new();
        for n in names.iter().chain([".shstrtab"].iter()) {
            offsets.push(shstr.len() as u32);
            shstr.extend_from_slice(n.as_bytes());
            shstr.push(0);
        }
        let shoff = 0x40 + shstr.len();
        let count = names.len() + 2; // null section, names, .shstrtab
        let mut elf = vec![0u8; 0x40];
        elf[..4].copy_from_slice(&ELF_MAGIC);
        elf[4] = 2;
        elf[5] = 1;
        elf[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        elf[0x3a..0x3c].copy_from_slice(&0x40u16.to_le_bytes());
        elf[0x3c..0x3e].copy_from_slice(&(count as u16).to_le_bytes());
        elf[0x3e..0x40].copy_from_slice(&((count - 1) as u16).to_le_bytes());
        elf.extend_from_slice(&shstr);
        elf.extend(std::iter::repeat_n(0, 0x40)); // null section
        for (i, off) in offsets.iter().enumerate() {
            let mut s = [0u8; 0x40];
            s[..4].copy_from_slice(&off.to_le_bytes());
            if i == names.len() {
                s[4..8].copy_from_slice(&3u32.to_le_bytes());
                s[0x18..0x20].copy_from_slice(&0x40u64.to_le_bytes());
                s[0x20..0x28].copy_from_slice(&(shstr.len() as u64).to_le_bytes());
            }
            elf.extend_from_slice(&s);
        }
        elf
    }

    #[test]
    fn cubin_kernels_are_its_nv_info_sections() {
        let elf = elf_with_sections(&[".text.k1", ".nv.info.k1", ".nv.info.k2", ".nv.info"]);
        assert_eq!(kernels(&elf), Ok(named(&["k1", "k2"])));
        // SAFETY: the vector is a complete image.
        assert_eq!(unsafe { image_len(elf.as_ptr()) }, Ok(elf.len()));
        assert!(kernels(&elf[..elf.len() - 10]).is_err(), "a truncated image is refused");
    }

    /// A fatbin of (kind, architecture, flags, payload) entries.
    fn fatbin(entries: &[(u16, u32, u64, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        for (kind, arch, flags, payload) in entries {
            let mut h = [0u8; 64];
            h[..2].copy_from_slice(&kind.to_le_bytes());
            h[4..8].copy_from_slice(&64u32.to_le_bytes());
            h[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
            h[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
            h[28..32].copy_from_slice(&arch.to_le_bytes());
            h[40..48].copy_from_slice(&flags.to_le_bytes());
            h[56..64].copy_from_slice(&64u64.to_le_bytes());
            body.extend_from_slice(&h);
            body.extend_from_slice(payload);
        }
        let mut f = Vec::new();
        f.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        f.extend_from_slice(&1u16.to_le_bytes());
        f.extend_from_slice(&16u16.to_le_bytes());
        f.extend_from_slice(&(body.len() as u64).to_le_bytes());
        f.extend_from_slice(&body);
        f
    }

    #[test]
    fn fatbin_kernels_are_those_of_the_entries_a_driver_loads() {
        let elf = elf_with_sections(&[".nv.info.from_elf"]);
        let (ptx, cubin) = (PTX.as_bytes(), elf.as_slice());
        // The sm_90 cubin, when there is one.
        let image = fatbin(&[(1, 90, 0, ptx), (2, 80, 0, cubin), (2, 90, 0, cubin)]);
        assert_eq!(kernels(&image), Ok(named(&["from_elf"])));
        // SAFETY: the vector is a complete image.
        assert_eq!(unsafe { image_len(image.as_ptr()) }, Ok(image.len()));
        assert!(kernels(&image[..image.len() - 1]).is_err());
        // Else the newest PTX the device can compile.
        let image = fatbin(&[(1, 80, 0, b".version 8.0\n.entry old{}"), (1, 86, 0, ptx), (1, 100, 0, b".entry new{}"), (2, 75, 0, cubin)]);
        assert_eq!(kernels(&image), Ok(named(&["_Z3addPfS_", "plain"])));
        // Else everything.
        assert_eq!(kernels(&fatbin(&[(2, 75, 0, cubin), (2, 100, 0, cubin)])), Ok(named(&["from_elf"])));
        let undecodable = fatbin(&[(2, 90, FATBIN_FLAG_COMPRESSED_LZ4, b"\xf0\x02")]);
        assert_eq!(kernels(&undecodable), Ok(Kernels::Any));
        // PTX with one entry, LZ4-compressed: 10 literals, then a 12-byte
        // match at offset 10, then an empty last sequence.
        let text = b".entry k{}";
        let mut block = vec![0xa8];
        block.extend_from_slice(text);
        block.extend_from_slice(&[10, 0, 0x00]);
        let lz4 = fatbin(&[(1, 90, FATBIN_FLAG_COMPRESSED_LZ4, &block)]);
        assert_eq!(kernels(&lz4), Ok(named(&["k"])));
    }

    #[test]
    fn lz4_blocks_decode() {
        // "abcabcabcabc!": 3 literals, a 9-byte match at offset 3, then 1 literal.
        let block = [0x35, b'a', b'b', b'c', 3, 0, 0x10, b'!'];
        assert_eq!(lz4_block(&block, 13).as_deref(), Some(&b"abcabcabcabc!"[..]));
        assert_eq!(lz4_block(&block, 12), None, "larger than declared");
        assert_eq!(lz4_block(&[0x35, b'a', b'b', b'c', 9, 0, 0x10, b'!'], 13), None, "offset before the start");
    }

    #[test]
    fn the_linked_image_lists_its_inputs_kernels() {
        let names: BTreeSet<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
        let vars: BTreeMap<String, u64> = [("v".to_string(), 24)].into();
        let image = linked_ptx(&names, &vars);
        assert_eq!(kernels(&image), Ok(Kernels::Named(names)));
        assert_eq!(globals(&image), vars);
    }
}
