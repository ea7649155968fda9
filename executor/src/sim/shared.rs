//! Global memory of a launch whose blocks run on several host threads
//! (`fairgpu_ptx::Module::run_parallel`): the context's allocations seen as
//! 32-bit atomic words, so that threads writing neighbouring bytes of one
//! word (two blocks' `char` results) both land, and a guest's racing
//! writes to the same bytes are a race of the guest's program, not of this
//! process. Every access is `Relaxed`: the blocks that run at once do not
//! order memory between them (the kernel has no fence or global atomic,
//! `Module::kernel_runs_in_parallel`), and what they wrote reaches the
//! caller when the threads are joined.

use super::{Hit, READ_SLACK};
use fairgpu_ptx::texture::{Image, Texture};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// The allocations of one context during one parallel launch.
pub(super) struct SharedAllocs<'a> {
    /// (base, words), by base.
    regions: Vec<(u64, &'a [AtomicU32])>,
    textures: &'a HashMap<u64, Texture>,
    surfaces: &'a HashMap<u64, Image>,
    /// Whether a thread wrote any of them (each view tells as it ends).
    wrote: AtomicBool,
}

/// `bytes` as 32-bit atomic words; `None` unless its start is aligned to 4
/// and its length a multiple of 4.
fn as_words(bytes: &mut [u8]) -> Option<&[AtomicU32]> {
    if bytes.is_empty() {
        return Some(&[]);
    }
    if !(bytes.as_ptr() as usize).is_multiple_of(4) || !bytes.len().is_multiple_of(4) {
        return None;
    }
    // SAFETY: the pointer is aligned to 4 (checked above) and valid for
    // `len` bytes, which make `len / 4` whole words (checked above);
    // `AtomicU32` has the size and alignment of `u32` and any bits are a
    // valid value. The slice borrows `bytes` exclusively for as long as it
    // lives, so every access to these bytes meanwhile goes through it,
    // atomically: none is a data race.
    Some(unsafe { std::slice::from_raw_parts(bytes.as_mut_ptr().cast(), bytes.len() / 4) })
}

impl<'a> SharedAllocs<'a> {
    /// The allocations as words; `None` if one of them cannot be (its
    /// bytes are not aligned to 4 in this process, or its length not a
    /// multiple of 4): the launch then runs on one thread.
    pub(super) fn new(
        allocs: &'a mut BTreeMap<u64, Vec<u8>>,
        textures: &'a HashMap<u64, Texture>,
        surfaces: &'a HashMap<u64, Image>,
    ) -> Option<SharedAllocs<'a>> {
        let regions = allocs
            .iter_mut()
            .map(|(&base, bytes)| Some((base, as_words(bytes)?)))
            .collect::<Option<Vec<_>>>()?;
        Some(SharedAllocs {
            regions,
            textures,
            surfaces,
            wrote: AtomicBool::new(false),
        })
    }

    /// Whether any thread wrote global memory.
    pub(super) fn wrote(&self) -> bool {
        self.wrote.load(Ordering::Relaxed)
    }

    /// The region holding `[addr, addr + len)` and the offset there.
    fn find(&self, addr: u64, len: usize) -> Option<(usize, usize)> {
        let k = self.regions.partition_point(|&(b, _)| b <= addr);
        let k = k.checked_sub(1)?;
        let (base, words) = self.regions[k];
        Hit::offset_in(base, words.len() * 4, addr, len).map(|off| (k, off))
    }

    /// As `Allocations::in_read_slack`: `[addr, addr + len)` overlaps no
    /// allocation and lies within [`READ_SLACK`] of one.
    fn in_read_slack(&self, addr: u64, len: usize) -> bool {
        let Some(end) = addr.checked_add(len as u64) else {
            return false;
        };
        let k = self.regions.partition_point(|&(b, _)| b <= addr);
        let prev = k
            .checked_sub(1)
            .map(|p| self.regions[p].0 + self.regions[p].1.len() as u64 * 4);
        let next = self.regions.get(k).map(|&(b, _)| b);
        if prev.is_some_and(|e| e > addr) || next.is_some_and(|b| b < end) {
            return false;
        }
        prev.is_some_and(|e| end - e <= READ_SLACK) || next.is_some_and(|b| b - addr <= READ_SLACK)
    }
}

impl fairgpu_ptx::SharedMemory for SharedAllocs<'_> {
    fn view(&self) -> Box<dyn fairgpu_ptx::Memory + '_> {
        Box::new(View {
            mem: self,
            wrote: false,
            last: 0,
        })
    }
}

/// One thread's handle on [`SharedAllocs`].
struct View<'s, 'a> {
    mem: &'s SharedAllocs<'a>,
    wrote: bool,
    /// The region the last access found: a warp's lanes, and its next
    /// accesses, mostly hit the same one.
    last: usize,
}

impl View<'_, '_> {
    /// As [`SharedAllocs::find`], trying the last region first.
    fn find(&mut self, addr: u64, len: usize) -> Option<(usize, usize)> {
        if let Some(&(base, words)) = self.mem.regions.get(self.last) {
            if let Some(off) = Hit::offset_in(base, words.len() * 4, addr, len) {
                return Some((self.last, off));
            }
        }
        let (k, off) = self.mem.find(addr, len)?;
        self.last = k;
        Some((k, off))
    }
}

impl Drop for View<'_, '_> {
    fn drop(&mut self) {
        if self.wrote {
            self.mem.wrote.store(true, Ordering::Relaxed);
        }
    }
}

fn out_of_bounds(addr: u64, len: usize) -> fairgpu_ptx::Error {
    fairgpu_ptx::Error::OutOfBounds {
        space: "global",
        addr,
        len: len as u64,
    }
}

/// Copies the bytes at `off` of `words` into `buf`.
fn load(words: &[AtomicU32], off: usize, buf: &mut [u8]) {
    if off.is_multiple_of(4) && buf.len().is_multiple_of(4) {
        for (c, w) in buf.chunks_exact_mut(4).zip(&words[off / 4..]) {
            c.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
        return;
    }
    let mut k = 0;
    while k < buf.len() {
        let at = off + k;
        let word = words[at / 4].load(Ordering::Relaxed).to_ne_bytes();
        let n = (4 - at % 4).min(buf.len() - k);
        buf[k..k + n].copy_from_slice(&word[at % 4..at % 4 + n]);
        k += n;
    }
}

/// Writes `data` at `off` of `words`: whole words as stores, parts of a
/// word as one atomic update of that word, so that the bytes around them,
/// which another thread may be writing, stay as they are.
fn store(words: &[AtomicU32], off: usize, data: &[u8]) {
    // Whole words (a warp's coalesced half, a vector, an aligned scalar):
    // one store each, without the per-byte bookkeeping below.
    if off.is_multiple_of(4) && data.len().is_multiple_of(4) {
        for (c, w) in data.chunks_exact(4).zip(&words[off / 4..]) {
            w.store(
                u32::from_ne_bytes(c.try_into().expect("4 bytes")),
                Ordering::Relaxed,
            );
        }
        return;
    }
    let mut k = 0;
    while k < data.len() {
        let at = off + k;
        let (w, b) = (at / 4, at % 4);
        let n = (4 - b).min(data.len() - k);
        if n == 4 {
            let v = u32::from_ne_bytes(data[k..k + 4].try_into().expect("4 bytes"));
            words[w].store(v, Ordering::Relaxed);
        } else {
            let mut bytes = [0u8; 4];
            let mut mask = [0u8; 4];
            bytes[b..b + n].copy_from_slice(&data[k..k + n]);
            mask[b..b + n].fill(0xff);
            let (v, m) = (u32::from_ne_bytes(bytes), u32::from_ne_bytes(mask));
            let _ = words[w].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(old & !m | v)
            });
        }
        k += n;
    }
}

impl fairgpu_ptx::Memory for View<'_, '_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), fairgpu_ptx::Error> {
        match self.find(addr, buf.len()) {
            Some((k, off)) => load(self.mem.regions[k].1, off, buf),
            None if self.mem.in_read_slack(addr, buf.len()) => buf.fill(0),
            None => return Err(out_of_bounds(addr, buf.len())),
        }
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), fairgpu_ptx::Error> {
        let (k, off) = self
            .find(addr, data.len())
            .ok_or_else(|| out_of_bounds(addr, data.len()))?;
        store(self.mem.regions[k].1, off, data);
        self.wrote = true;
        Ok(())
    }

    fn texture(&self, handle: u64) -> Option<Texture> {
        self.mem.textures.get(&handle).copied()
    }

    fn surface(&self, handle: u64) -> Option<Image> {
        self.mem.surfaces.get(&handle).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fairgpu_ptx::SharedMemory;

    #[test]
    fn bytes_read_and_written_through_words_are_the_allocation_s_bytes() {
        let mut allocs = BTreeMap::new();
        allocs.insert(0x1000u64, (0..64u8).collect::<Vec<u8>>());
        allocs.insert(0x2000u64, vec![0u8; 16]);
        let (t, s) = (HashMap::new(), HashMap::new());
        {
            let shared = SharedAllocs::new(&mut allocs, &t, &s).expect("aligned");
            let mut v = shared.view();
            let mut buf = [0u8; 7];
            v.read(0x1003, &mut buf).unwrap();
            assert_eq!(buf, [3, 4, 5, 6, 7, 8, 9]);
            let mut w = [0u8; 8];
            v.read(0x1008, &mut w).unwrap();
            assert_eq!(w, [8, 9, 10, 11, 12, 13, 14, 15]);
            // Unaligned and partial writes keep their neighbours; whole
            // words are written whole.
            v.write(0x2001, &[0xaa, 0xbb, 0xcc, 0xdd, 0xee]).unwrap();
            v.write(0x2008, &[1, 2, 3, 4]).unwrap();
            v.write(0x1030, &[9; 12]).unwrap();
            // Past the end: a fault; within the slack: zeros.
            assert!(v.write(0x100e + 0x32, &[0; 4]).is_err());
            assert!(v.read(0x2010, &mut [0; 4]).is_ok());
            assert!(v.read(0x2000 + 0x10000 + 0x100, &mut [0; 4]).is_err());
            drop(v);
            assert!(shared.wrote());
        }
        assert_eq!(
            allocs[&0x2000],
            [0, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0]
        );
        let mut want: Vec<u8> = (0..64).collect();
        want[0x30..0x3c].fill(9);
        assert_eq!(allocs[&0x1000], want);
    }

    #[test]
    fn threads_writing_neighbouring_bytes_of_one_word_all_land() {
        let mut allocs = BTreeMap::new();
        allocs.insert(0x1000u64, vec![0u8; 4096]);
        let (t, s) = (HashMap::new(), HashMap::new());
        {
            let shared = SharedAllocs::new(&mut allocs, &t, &s).expect("aligned");
            std::thread::scope(|scope| {
                for k in 0..4u64 {
                    let shared = &shared;
                    scope.spawn(move || {
                        let mut v = shared.view();
                        // Thread k writes byte k of every word, 200 times.
                        for _ in 0..200 {
                            for w in 0..1024u64 {
                                v.write(0x1000 + w * 4 + k, &[k as u8 + 1]).unwrap();
                            }
                        }
                    });
                }
            });
        }
        assert!(allocs[&0x1000].chunks(4).all(|c| c == [1, 2, 3, 4]));
    }
}
