//! The function symbols of an ELF file, read from its `.symtab` (for tests that inspect how their
//! own binary was compiled).

/// The names of the function symbols of an ELF64 little-endian file, or None when the bytes are
/// not one or have no symbol table.
pub fn function_symbols(elf: &[u8]) -> Option<Vec<String>> {
    let u16_at = |at: usize| elf.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |at: usize| elf.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
    let u64_at = |at: usize| elf.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize);
    // Magic, 64-bit class, little-endian.
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let (sh_off, sh_size, sh_num) = (u64_at(0x28)?, u16_at(0x3a)?, u16_at(0x3c)?);
    // (type, offset, size, link, entry size) of section i.
    let section = |i: usize| -> Option<(usize, usize, usize, usize, usize)> {
        let at = sh_off + i * sh_size;
        Some((u32_at(at + 4)?, u64_at(at + 0x18)?, u64_at(at + 0x20)?, u32_at(at + 0x28)?, u64_at(at + 0x38)?))
    };
    const SHT_SYMTAB: usize = 2;
    const STT_FUNC: u8 = 2;
    let (_, off, size, link, entsize) = (0..sh_num).filter_map(section).find(|s| s.0 == SHT_SYMTAB)?;
    let (_, str_off, str_size, _, _) = section(link)?;
    let strings = elf.get(str_off..str_off + str_size)?;
    let mut names = Vec::new();
    for sym in elf.get(off..off + size)?.chunks_exact(entsize.max(24)) {
        if sym[4] & 0xf != STT_FUNC {
            continue;
        }
        let name_at = u32::from_le_bytes(sym[..4].try_into().unwrap()) as usize;
        let name = strings.get(name_at..)?.split(|&b| b == 0).next()?;
        names.push(String::from_utf8_lossy(name).into_owned());
    }
    Some(names)
}

/// Whether a (mangled) symbol is an x86 arithmetic intrinsic compiled out of line: a function of
/// `core::core_arch` whose name is an `_mm*` intrinsic, other than the unaligned loads and stores.
/// Those stay calls from inside the `#[target_feature]` entry points themselves in builds
/// without LTO (tests, `profile.gpu`): rustc places their one instance in another codegen unit,
/// whatever the unit count. Seen in the fused kernels' `hsums`, a lane array once per tile; a
/// release build (thin LTO) inlines them.
pub fn is_out_of_line_intrinsic(name: &str) -> bool {
    name.contains("core_arch") && name.contains("_mm") && !name.contains("_loadu_") && !name.contains("_storeu_")
}
