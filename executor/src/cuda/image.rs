//! Checks on a guest's module image before `cuModuleLoadData` sees it.
//!
//! `cuModuleLoadData` takes a bare pointer, no length: the driver finds the
//! end of a PTX image at its NUL and the extent of a cubin or fatbin from
//! the sizes in its headers. A guest image is therefore checked here so that
//! the driver cannot be led to read past the buffer we own:
//! - ELF (cubin): 64-bit little-endian `EM_CUDA`; the program and section
//!   header tables and every section and segment with file contents lie
//!   inside the image.
//! - fatbin: the header's size and every entry's header and payload lie
//!   inside the image. The contents of entries (embedded cubins, PTX,
//!   compressed payloads) are parsed by the driver alone.
//! - PTX: text up to the first NUL; a copy with a NUL appended when the
//!   image has none.
//! - anything else is refused; in particular the host-side fatbin wrapper
//!   (`__fatBinC_Wrapper_t`), which holds a pointer the driver would follow.

use std::borrow::Cow;

const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
const ELFCLASS64: u8 = 2;
const ELFDATA2LSB: u8 = 1;
const EM_CUDA: u16 = 190;
const SHT_NOBITS: u32 = 8;
const ELF64_EHDR: usize = 64;
const ELF64_PHDR: usize = 56;
const ELF64_SHDR: usize = 64;

const FATBIN_MAGIC: u32 = 0xBA55_ED50;
const FATBIN_WRAPPER_MAGIC: u32 = 0x4662_43B1;
const FATBIN_HEADER: usize = 16;
const FATBIN_ENTRY_HEADER_MIN: usize = 16;

/// Checks `image` and returns the bytes to hand to `cuModuleLoadData`:
/// the image itself, or for PTX without a terminating NUL a copy with one.
pub fn prepare_image(image: &[u8]) -> Result<Cow<'_, [u8]>, String> {
    if image.is_empty() {
        return Err("empty module image".to_string());
    }
    if image.starts_with(&ELF_MAGIC) {
        check_elf(image)?;
        return Ok(Cow::Borrowed(image));
    }
    match read_u32(image, 0) {
        Some(FATBIN_MAGIC) => {
            check_fatbin(image)?;
            Ok(Cow::Borrowed(image))
        }
        Some(FATBIN_WRAPPER_MAGIC) => Err(
            "a fatbin wrapper (it holds a host pointer); send the fatbin it points to".to_string(),
        ),
        _ => nul_terminated_ptx(image),
    }
}

/// The PTX text of a prepared image (without its NUL), or `None` for a
/// cubin or fatbin.
pub(crate) fn ptx_text(prepared: &[u8]) -> Option<&str> {
    if prepared.starts_with(&ELF_MAGIC) || read_u32(prepared, 0) == Some(FATBIN_MAGIC) {
        return None;
    }
    let text = prepared.strip_suffix(&[0]).unwrap_or(prepared);
    std::str::from_utf8(text).ok()
}

/// PTX text ready for the driver: the image up to and including its first
/// NUL, or a copy with a NUL appended when it has none. Refuses images that
/// are not text (control characters other than whitespace).
pub(crate) fn nul_terminated_ptx(image: &[u8]) -> Result<Cow<'_, [u8]>, String> {
    let nul = image.iter().position(|&b| b == 0);
    let text = &image[..nul.unwrap_or(image.len())];
    if text.iter().all(u8::is_ascii_whitespace) {
        return Err("empty PTX text".to_string());
    }
    if let Some(b) = text
        .iter()
        .find(|&&b| (b < 0x20 && !b.is_ascii_whitespace()) || b == 0x7f)
    {
        return Err(format!(
            "not ELF, fatbin or PTX text (control byte {b:#04x})"
        ));
    }
    match nul {
        Some(n) => Ok(Cow::Borrowed(&image[..=n])),
        None => {
            let mut owned = Vec::with_capacity(text.len() + 1);
            owned.extend_from_slice(text);
            owned.push(0);
            Ok(Cow::Owned(owned))
        }
    }
}

fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([s[0], s[1]]))
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    let mut w = [0u8; 8];
    w.copy_from_slice(s);
    Some(u64::from_le_bytes(w))
}

/// Whether `[offset, offset + len)` lies inside an image of `size` bytes.
fn within(offset: u64, len: u64, size: usize) -> bool {
    offset
        .checked_add(len)
        .is_some_and(|end| end <= size as u64)
}

/// A table of `count` entries of `entsize` bytes at `offset`, each at least
/// `min` bytes: the offsets of its entries.
fn table(
    image: &[u8],
    what: &str,
    offset: u64,
    count: u16,
    entsize: u16,
    min: usize,
) -> Result<Vec<usize>, String> {
    if count == 0 {
        return Ok(Vec::new());
    }
    if usize::from(entsize) < min {
        return Err(format!("ELF {what} entries of {entsize} bytes"));
    }
    let bytes = u64::from(count) * u64::from(entsize);
    if !within(offset, bytes, image.len()) {
        return Err(format!("ELF {what} table outside the image"));
    }
    // In range of the image, so in range of usize.
    let base = offset as usize;
    Ok((0..usize::from(count))
        .map(|i| base + i * usize::from(entsize))
        .collect())
}

fn check_elf(image: &[u8]) -> Result<(), String> {
    let short = || "truncated ELF header".to_string();
    if image.len() < ELF64_EHDR {
        return Err(short());
    }
    if image[4] != ELFCLASS64 || image[5] != ELFDATA2LSB {
        return Err("not a 64-bit little-endian ELF image".to_string());
    }
    let machine = read_u16(image, 18).ok_or_else(short)?;
    if machine != EM_CUDA {
        return Err(format!("ELF machine {machine}, not a CUDA cubin"));
    }
    let phoff = read_u64(image, 32).ok_or_else(short)?;
    let shoff = read_u64(image, 40).ok_or_else(short)?;
    let phentsize = read_u16(image, 54).ok_or_else(short)?;
    let phnum = read_u16(image, 56).ok_or_else(short)?;
    let shentsize = read_u16(image, 58).ok_or_else(short)?;
    let shnum = read_u16(image, 60).ok_or_else(short)?;
    if shnum == 0 && shoff != 0 {
        return Err("ELF with an extended section count".to_string());
    }
    for at in table(image, "program header", phoff, phnum, phentsize, ELF64_PHDR)? {
        let off = read_u64(image, at + 8).ok_or_else(short)?;
        let filesz = read_u64(image, at + 32).ok_or_else(short)?;
        if !within(off, filesz, image.len()) {
            return Err("ELF segment outside the image".to_string());
        }
    }
    for at in table(image, "section header", shoff, shnum, shentsize, ELF64_SHDR)? {
        let kind = read_u32(image, at + 4).ok_or_else(short)?;
        let off = read_u64(image, at + 24).ok_or_else(short)?;
        let size = read_u64(image, at + 32).ok_or_else(short)?;
        if kind != SHT_NOBITS && !within(off, size, image.len()) {
            return Err("ELF section outside the image".to_string());
        }
    }
    Ok(())
}

fn check_fatbin(image: &[u8]) -> Result<(), String> {
    let short = || "truncated fatbin header".to_string();
    let header_size = usize::from(read_u16(image, 6).ok_or_else(short)?);
    let fat_size = read_u64(image, 8).ok_or_else(short)?;
    if header_size < FATBIN_HEADER {
        return Err(format!("fatbin header of {header_size} bytes"));
    }
    if !within(header_size as u64, fat_size, image.len()) {
        return Err("fatbin larger than the image".to_string());
    }
    // In range of the image, so in range of usize.
    let end = header_size + fat_size as usize;
    let mut at = header_size;
    while end - at >= FATBIN_ENTRY_HEADER_MIN {
        let entry_header = read_u32(image, at + 4).ok_or_else(short)?;
        let payload = read_u64(image, at + 8).ok_or_else(short)?;
        if entry_header == 0 && payload == 0 {
            // Zero padding after the last entry.
            break;
        }
        if (entry_header as usize) < FATBIN_ENTRY_HEADER_MIN {
            return Err(format!("fatbin entry header of {entry_header} bytes"));
        }
        // A payload size near 2^64 must not wrap into a small entry: the
        // driver would then read the payload's real size past the image.
        let entry = u64::from(entry_header)
            .checked_add(payload)
            .ok_or_else(|| "fatbin entry outside the fatbin".to_string())?;
        if !within(at as u64, entry, end) {
            return Err("fatbin entry outside the fatbin".to_string());
        }
        at += entry as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n";

    fn elf(sections: &[(u32, u64, u64)], extra: usize) -> Vec<u8> {
        // Header, then `extra` bytes of contents, then the section table.
        let shoff = ELF64_EHDR + extra;
        let mut b = vec![0u8; shoff + sections.len() * ELF64_SHDR];
        b[..4].copy_from_slice(&ELF_MAGIC);
        b[4] = ELFCLASS64;
        b[5] = ELFDATA2LSB;
        b[18..20].copy_from_slice(&EM_CUDA.to_le_bytes());
        b[40..48].copy_from_slice(&(shoff as u64).to_le_bytes());
        b[58..60].copy_from_slice(&(ELF64_SHDR as u16).to_le_bytes());
        b[60..62].copy_from_slice(&(sections.len() as u16).to_le_bytes());
        for (i, (kind, off, size)) in sections.iter().enumerate() {
            let at = shoff + i * ELF64_SHDR;
            b[at + 4..at + 8].copy_from_slice(&kind.to_le_bytes());
            b[at + 24..at + 32].copy_from_slice(&off.to_le_bytes());
            b[at + 32..at + 40].copy_from_slice(&size.to_le_bytes());
        }
        b
    }

    fn fatbin(entries: &[(u32, u64)], slack: usize) -> Vec<u8> {
        let body: u64 = entries.iter().map(|(h, p)| u64::from(*h) + p).sum();
        let mut b = Vec::new();
        b.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&(FATBIN_HEADER as u16).to_le_bytes());
        b.extend_from_slice(&(body + slack as u64).to_le_bytes());
        for (h, p) in entries {
            let start = b.len();
            b.extend_from_slice(&2u16.to_le_bytes());
            b.extend_from_slice(&0x101u16.to_le_bytes());
            b.extend_from_slice(&h.to_le_bytes());
            b.extend_from_slice(&p.to_le_bytes());
            b.resize(start + *h as usize + *p as usize, 0xab);
        }
        b.resize(b.len() + slack, 0);
        b
    }

    #[test]
    fn ptx_without_nul_gets_one_appended() {
        let out = prepare_image(PTX.as_bytes()).unwrap();
        assert!(matches!(out, Cow::Owned(_)));
        assert_eq!(out.last(), Some(&0));
        assert_eq!(&out[..out.len() - 1], PTX.as_bytes());
    }

    #[test]
    fn ptx_with_nul_is_borrowed_up_to_it() {
        let mut img = PTX.as_bytes().to_vec();
        img.push(0);
        img.extend_from_slice(b"trailing bytes the driver never reads");
        let out = prepare_image(&img).unwrap();
        assert!(matches!(out, Cow::Borrowed(_)));
        assert_eq!(out.len(), PTX.len() + 1);
        assert_eq!(out.last(), Some(&0));
    }

    #[test]
    fn binary_garbage_empty_and_wrappers_are_refused() {
        assert!(prepare_image(b"").is_err());
        assert!(prepare_image(b" \n\t").is_err());
        assert!(prepare_image(b"\0.version 7.0").is_err());
        assert!(prepare_image(&[0x01, 0x02, 0x03, 0x04, 0x05]).is_err());
        let mut wrapper = FATBIN_WRAPPER_MAGIC.to_le_bytes().to_vec();
        wrapper.extend_from_slice(&[0u8; 20]);
        let err = prepare_image(&wrapper).unwrap_err();
        assert!(err.contains("wrapper"), "{err}");
    }

    #[test]
    fn elf_tables_and_sections_must_lie_inside_the_image() {
        let good = elf(&[(0, 0, 0), (1, 64, 32), (SHT_NOBITS, 0, 1 << 40)], 32);
        assert!(matches!(prepare_image(&good), Ok(Cow::Borrowed(_))));

        let past_end = elf(&[(1, 64, 4096)], 32);
        assert!(prepare_image(&past_end).unwrap_err().contains("section"));

        let overflow = elf(&[(1, u64::MAX, 2)], 32);
        assert!(prepare_image(&overflow).is_err());

        let mut table_past_end = elf(&[(1, 64, 8)], 32);
        table_past_end[60..62].copy_from_slice(&50u16.to_le_bytes());
        assert!(prepare_image(&table_past_end)
            .unwrap_err()
            .contains("table"));

        let mut host_elf = good.clone();
        host_elf[18..20].copy_from_slice(&62u16.to_le_bytes());
        assert!(prepare_image(&host_elf).unwrap_err().contains("machine"));

        let mut elf32 = good;
        elf32[4] = 1;
        assert!(prepare_image(&elf32).is_err());

        assert!(prepare_image(&ELF_MAGIC).is_err());
    }

    #[test]
    fn fatbin_entries_must_lie_inside_the_fatbin() {
        let good = fatbin(&[(64, 128), (72, 40)], 0);
        assert!(matches!(prepare_image(&good), Ok(Cow::Borrowed(_))));
        let padded = fatbin(&[(64, 128)], 24);
        assert!(prepare_image(&padded).is_ok());

        let mut lying_entry = fatbin(&[(64, 128)], 0);
        lying_entry[16 + 8..16 + 16].copy_from_slice(&(1u64 << 20).to_le_bytes());
        assert!(prepare_image(&lying_entry).unwrap_err().contains("entry"));

        let mut lying_size = fatbin(&[(64, 128)], 0);
        lying_size[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(prepare_image(&lying_size).unwrap_err().contains("larger"));

        let mut tiny_entry_header = fatbin(&[(64, 128)], 0);
        tiny_entry_header[16 + 4..16 + 8].copy_from_slice(&4u32.to_le_bytes());
        assert!(prepare_image(&tiny_entry_header).is_err());

        assert!(prepare_image(&FATBIN_MAGIC.to_le_bytes()).is_err());
    }

    /// Found by the `module_image` fuzz target: an entry whose payload size
    /// is so large that header + payload wraps around 2^64 looked like a
    /// small entry inside the fatbin (in release builds; a panic with
    /// overflow checks), and the driver would have read the payload's real
    /// size past the guest's image.
    #[test]
    fn a_fatbin_entry_whose_size_wraps_around_is_refused() {
        let mut wrapping = fatbin(&[(64, 128)], 0);
        let payload = u64::MAX - 63 + 32; // 64 + payload == 32 (mod 2^64)
        wrapping[16 + 8..16 + 16].copy_from_slice(&payload.to_le_bytes());
        assert!(prepare_image(&wrapping).unwrap_err().contains("entry"));
    }
}
