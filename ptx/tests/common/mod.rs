//! A Vec-backed global memory and helpers to launch kernels in tests.
#![allow(dead_code)]

use fairgpu_ptx::heap::{DeviceHeap, Heap};
use fairgpu_ptx::texture::{Image, Texture};
use fairgpu_ptx::{Dims, Error, Globals, Limits, Memory, Module, RunStats, SharedMemory};
use std::sync::Mutex;

/// Allocations at distinct addresses with guard gaps between them, and the
/// texture and surface objects kernels name by handle.
#[derive(Debug, Default)]
pub struct VecMemory {
    allocs: Vec<(u64, Vec<u8>)>,
    textures: Vec<(u64, Texture)>,
    surfaces: Vec<(u64, Image)>,
    /// The device heap, in one of the allocations.
    heap: Option<DeviceHeap>,
}

/// Handles of texture and surface objects (as the driver's, small
/// integers).
const HANDLE_BASE: u64 = 0x100;

const BASE: u64 = 0x7000_0000_0000;

impl VecMemory {
    pub fn alloc(&mut self, bytes: Vec<u8>) -> u64 {
        let at = self.allocs.last().map_or(BASE, |(a, v)| {
            (a + v.len() as u64 + 256).div_ceil(256) * 256
        });
        self.allocs.push((at, bytes));
        at
    }

    /// Gives kernels a device heap of `size` bytes (one allocation).
    pub fn with_heap(mut self, size: u64) -> Self {
        let base = self.alloc(vec![0; size as usize]);
        self.heap = Some(DeviceHeap {
            base,
            heap: Heap::new(size, 1 << 16),
        });
        self
    }

    /// The heap's live blocks.
    pub fn heap_blocks(&self) -> usize {
        self.heap.as_ref().map_or(0, |h| h.heap.live_blocks())
    }

    pub fn alloc_u32(&mut self, v: &[u32]) -> u64 {
        self.alloc(v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }

    pub fn alloc_i32(&mut self, v: &[i32]) -> u64 {
        self.alloc(v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }

    pub fn alloc_f32(&mut self, v: &[f32]) -> u64 {
        self.alloc(v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }

    pub fn alloc_f64(&mut self, v: &[f64]) -> u64 {
        self.alloc(v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }

    pub fn alloc_u64(&mut self, v: &[u64]) -> u64 {
        self.alloc(v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }

    pub fn bytes(&self, at: u64) -> &[u8] {
        &self
            .allocs
            .iter()
            .find(|(a, _)| *a == at)
            .expect("allocation")
            .1
    }

    pub fn u32s(&self, at: u64) -> Vec<u32> {
        self.bytes(at)
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    pub fn i32s(&self, at: u64) -> Vec<i32> {
        self.u32s(at).into_iter().map(|v| v as i32).collect()
    }

    pub fn f32s(&self, at: u64) -> Vec<f32> {
        self.u32s(at).into_iter().map(f32::from_bits).collect()
    }

    pub fn u64s(&self, at: u64) -> Vec<u64> {
        self.bytes(at)
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    pub fn f64s(&self, at: u64) -> Vec<f64> {
        self.u64s(at).into_iter().map(f64::from_bits).collect()
    }

    /// Makes `t` a texture object; its handle.
    pub fn add_texture(&mut self, t: Texture) -> u64 {
        let h = HANDLE_BASE + (self.textures.len() + self.surfaces.len()) as u64;
        self.textures.push((h, t));
        h
    }

    /// Makes `img` a surface object; its handle.
    pub fn add_surface(&mut self, img: Image) -> u64 {
        let h = HANDLE_BASE + (self.textures.len() + self.surfaces.len()) as u64;
        self.surfaces.push((h, img));
        h
    }

    fn find(&mut self, addr: u64, len: usize) -> Result<&mut [u8], Error> {
        for (a, v) in &mut self.allocs {
            if addr >= *a && addr - *a + len as u64 <= v.len() as u64 {
                let off = (addr - *a) as usize;
                return Ok(&mut v[off..off + len]);
            }
        }
        Err(Error::OutOfBounds {
            space: "global",
            addr,
            len: len as u64,
        })
    }
}

impl Memory for VecMemory {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Error> {
        let len = buf.len();
        buf.copy_from_slice(self.find(addr, len)?);
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Error> {
        self.find(addr, data.len())?.copy_from_slice(data);
        Ok(())
    }

    fn malloc(&mut self, size: u64) -> u64 {
        self.heap.as_mut().map_or(0, |h| h.malloc(size))
    }

    fn free(&mut self, addr: u64) -> Result<(), Error> {
        match &mut self.heap {
            Some(h) => h.free(addr),
            None => Err(Error::BadFree { addr }),
        }
    }

    fn texture(&self, handle: u64) -> Option<Texture> {
        self.textures
            .iter()
            .find(|(h, _)| *h == handle)
            .map(|&(_, t)| t)
    }

    fn surface(&self, handle: u64) -> Option<Image> {
        self.surfaces
            .iter()
            .find(|(h, _)| *h == handle)
            .map(|&(_, s)| s)
    }
}

/// A [`VecMemory`] that the threads of a parallel launch share, one access
/// at a time.
pub struct LockedMemory(pub Mutex<VecMemory>);

struct LockedView<'a>(&'a Mutex<VecMemory>);

impl LockedView<'_> {
    fn with<T>(&self, f: impl FnOnce(&mut VecMemory) -> T) -> T {
        f(&mut self.0.lock().expect("not poisoned"))
    }
}

impl Memory for LockedView<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.with(|m| m.read(addr, buf))
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Error> {
        self.with(|m| m.write(addr, data))
    }
    fn texture(&self, handle: u64) -> Option<Texture> {
        self.with(|m| m.texture(handle))
    }
    fn surface(&self, handle: u64) -> Option<Image> {
        self.with(|m| m.surface(handle))
    }
}

impl SharedMemory for LockedMemory {
    fn view(&self) -> Box<dyn Memory + '_> {
        Box::new(LockedView(&self.0))
    }
}

/// A parameter buffer built the way the CUDA driver lays it out.
#[derive(Debug, Default)]
pub struct Params(pub Vec<u8>);

impl Params {
    pub fn new() -> Self {
        Params(Vec::new())
    }
    fn push(mut self, bytes: &[u8], align: usize) -> Self {
        while !self.0.len().is_multiple_of(align) {
            self.0.push(0);
        }
        self.0.extend_from_slice(bytes);
        self
    }
    pub fn ptr(self, v: u64) -> Self {
        self.push(&v.to_le_bytes(), 8)
    }
    pub fn u64(self, v: u64) -> Self {
        self.push(&v.to_le_bytes(), 8)
    }
    pub fn u32(self, v: u32) -> Self {
        self.push(&v.to_le_bytes(), 4)
    }
    pub fn i32(self, v: i32) -> Self {
        self.push(&v.to_le_bytes(), 4)
    }
    pub fn f32(self, v: f32) -> Self {
        self.push(&v.to_le_bytes(), 4)
    }
    pub fn bytes(self, v: &[u8], align: usize) -> Self {
        self.push(v, align)
    }
}

pub fn dims(grid: [u32; 3], block: [u32; 3], shared_bytes: u32) -> Dims {
    Dims {
        grid,
        block,
        shared_bytes,
        part: None,
        cooperative: None,
    }
}

pub fn kernel(name: &str) -> Module {
    let path = format!("{}/tests/kernels/{name}.ptx", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("kernel PTX");
    Module::parse(&text).expect("parses")
}

pub fn launch(
    m: &Module,
    globals: &mut Globals,
    name: &str,
    d: Dims,
    p: Params,
    mem: &mut VecMemory,
) -> Result<RunStats, Error> {
    m.run(globals, name, &d, &p.0, mem, &Limits::default())
}

/// Deterministic pseudo-random numbers (xorshift).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn f32(&mut self) -> f32 {
        (self.next() % 2000) as f32 / 100.0 - 10.0
    }
}
