//! Kernel slicing (FairGV section 3.3, Table 4): a launch predicted to hold
//! the device longer than a threshold runs as sub-launches over boxes of
//! its grid's blocks, with a scheduling point between them, so that other
//! VMs run while one VM's long kernel is in progress
//! (docs/long-kernels.md).
//!
//! - **Prediction** ([`Slicer::plan`]): the executor's history of the
//!   kernel's measured (CudaExecutor) or modelled (SimGpu) device time per
//!   block, times the launch's blocks. A kernel without history runs whole
//!   (and is measured), unless its grid is larger than FairGV's "very
//!   long" hint of 600 × 600 blocks.
//! - **Parts** ([`Parts`]): boxes of at least [`SlicingConfig::min_blocks`]
//!   blocks, about half a threshold of predicted device time each
//!   ([`PARTS_PER_THRESHOLD`]), in the
//!   order a GPU dispatches blocks (x fastest, then y, then z). Each part is
//!   a box, so the kernel sees the indices of the whole grid.
//! - **Not sliced**: cooperative launches (grid-wide barriers need every
//!   block resident), thread-block clusters, and kernels the executor
//!   cannot run in parts (CudaExecutor: modules not loaded from PTX, kernels
//!   that read `%ctaid` in a device function, cluster or grid-sync code;
//!   see `fairgpu_ptx::part`). They run whole; the first such launch of a
//!   kernel is logged and each is counted.
//!
//! A sliced launch answers the guest after its first part (a launch is
//! asynchronous) and leaves a [`SliceJob`] on its channel: the server asks
//! for the next part before the channel's next request
//! ([`crate::host::Handler::resume`]), so the channel's later requests stay
//! ordered after the whole kernel, and each part is admitted under the
//! grant and accounted like any kernel ([`crate::accounting`]). An error of
//! a later part is the channel's deferred error, as an asynchronous
//! launch's is.

use fairgpu_executor::{CtxId, FnId, GridPart, LaunchConfig, StreamId};
use fairgpu_protocol::wire::ValidRequest;

/// FairGV's hint for a "very long" grid with no history: more than
/// 600 × 600 blocks.
pub const VERY_LONG_BLOCKS: u64 = 600 * 600;

/// Parts per threshold of predicted device time. With parts of a whole
/// threshold (one slice by default), a holder that issued one part and
/// then a second before its release (a lease ending, a sample that had not
/// yet filled the slice) kept the device two slices; with half, the other
/// VMs wait about one.
pub const PARTS_PER_THRESHOLD: u64 = 2;

/// The slicing settings of `[daemon]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlicingConfig {
    /// Slice at all.
    pub enabled: bool,
    /// Launches predicted longer than this are sliced, and each part aims
    /// at about half this much device time, ns.
    pub threshold_ns: u64,
    /// The fewest blocks in one part (FairGV: 1,500 kept the slowdown
    /// under 5%).
    pub min_blocks: u32,
}

impl SlicingConfig {
    /// Slicing off.
    pub const OFF: SlicingConfig = SlicingConfig {
        enabled: false,
        threshold_ns: u64::MAX,
        min_blocks: u32::MAX,
    };
}

/// Boxes tiling a grid, about `chunk` blocks each, x fastest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parts {
    grid: [u32; 3],
    /// Each box's nominal extent.
    extent: [u32; 3],
    /// The next box's offset; `None` when done.
    next: Option<[u32; 3]>,
}

impl Parts {
    /// Boxes of about `chunk` blocks over `grid` (no dimension zero).
    pub fn new(grid: [u32; 3], chunk: u64) -> Parts {
        let chunk = chunk.max(1);
        let [gx, gy, gz] = grid.map(u64::from);
        // Whole rows or planes where a chunk holds some; else a piece of
        // a row. Every value fits its dimension, hence u32.
        let extent = if gx >= chunk {
            [chunk as u32, 1, 1]
        } else if gx * gy >= chunk {
            [gx as u32, chunk.div_ceil(gx).clamp(1, gy) as u32, 1]
        } else {
            [
                gx as u32,
                gy as u32,
                chunk.div_ceil(gx * gy).clamp(1, gz) as u32,
            ]
        };
        Parts {
            grid,
            extent,
            next: (!grid.contains(&0)).then_some([0; 3]),
        }
    }

    /// Whether every box was returned.
    pub fn is_done(&self) -> bool {
        self.next.is_none()
    }

    /// How many boxes there are in all.
    pub fn total(&self) -> u64 {
        (0..3)
            .map(|d| u64::from(self.grid[d]).div_ceil(u64::from(self.extent[d])))
            .product()
    }
}

impl Iterator for Parts {
    type Item = GridPart;

    fn next(&mut self) -> Option<GridPart> {
        let offset = self.next?;
        let mut extent = [0; 3];
        for d in 0..3 {
            extent[d] = self.extent[d].min(self.grid[d] - offset[d]);
        }
        // Advance x, then y, then z, by whole boxes.
        let mut n = offset;
        self.next = None;
        for d in 0..3 {
            n[d] += extent[d];
            if n[d] < self.grid[d] {
                self.next = Some(n);
                break;
            }
            n[d] = 0;
        }
        Some(GridPart { offset, extent })
    }
}

/// The rest of a sliced launch, kept per channel.
#[derive(Debug)]
pub struct SliceJob {
    /// The launch request as validated (a private copy), answered already.
    pub req: ValidRequest,
    /// Its context, function, geometry, parameters and stream.
    pub ctx: CtxId,
    /// The kernel.
    pub f: FnId,
    /// The whole launch's geometry.
    pub cfg: LaunchConfig,
    /// The packed parameters.
    pub params: Vec<u8>,
    /// The stream.
    pub stream: Option<StreamId>,
    /// The parts not launched yet.
    pub parts: Parts,
}

/// What to do with one launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Launch it whole.
    Whole,
    /// Launch it as these parts.
    Sliced(Parts),
}

/// Decides which launches are sliced.
#[derive(Debug, Clone, Copy)]
pub struct Slicer {
    /// The settings.
    pub cfg: SlicingConfig,
}

impl Slicer {
    /// The plan for a launch of `blocks` blocks over `grid`, predicted to
    /// take `predicted` ns (`None`: no history).
    pub fn plan(&self, grid: [u32; 3], predicted: Option<u64>) -> Plan {
        let c = self.cfg;
        let blocks: u64 = grid.iter().map(|&v| u64::from(v)).product();
        let min = u64::from(c.min_blocks).max(1);
        if !c.enabled || blocks < 2 * min {
            return Plan::Whole;
        }
        let chunk = match predicted {
            Some(ns) if ns > c.threshold_ns => {
                // About half a threshold per part, never under the minimum.
                let per_part = u128::from(blocks) * u128::from(c.threshold_ns.max(1))
                    / (u128::from(ns) * u128::from(PARTS_PER_THRESHOLD));
                (per_part as u64).max(min)
            }
            Some(_) => return Plan::Whole,
            None if blocks > VERY_LONG_BLOCKS => min,
            None => return Plan::Whole,
        };
        if chunk >= blocks {
            return Plan::Whole;
        }
        Plan::Sliced(Parts::new(grid, chunk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn slicer(threshold_ns: u64, min_blocks: u32) -> Slicer {
        Slicer {
            cfg: SlicingConfig {
                enabled: true,
                threshold_ns,
                min_blocks,
            },
        }
    }

    #[test]
    fn short_or_small_launches_run_whole() {
        let s = slicer(6_000_000, 1500);
        assert_eq!(s.plan([100_000, 1, 1], Some(5_000_000)), Plan::Whole);
        assert_eq!(
            s.plan([2_999, 1, 1], Some(100_000_000)),
            Plan::Whole,
            "< 2 parts"
        );
        assert_eq!(s.plan([100_000, 1, 1], None), Plan::Whole, "no history");
        let off = Slicer {
            cfg: SlicingConfig::OFF,
        };
        assert_eq!(off.plan([1 << 20, 1, 1], Some(u64::MAX)), Plan::Whole);
    }

    #[test]
    fn a_long_launch_is_cut_into_parts_of_about_half_a_threshold() {
        let s = slicer(6_000_000, 1500);
        let Plan::Sliced(p) = s.plan([60_000, 1, 1], Some(100_000_000)) else {
            panic!("sliced");
        };
        // 100 ms over 60,000 blocks: 1,800 blocks per 3 ms part.
        assert_eq!(p.total(), 34);
        let parts: Vec<_> = p.collect();
        assert_eq!(parts[0].extent, [1800, 1, 1]);
        assert_eq!(parts[33].offset, [59_400, 0, 0]);
        assert_eq!(parts[33].extent, [600, 1, 1]);
        // The minimum wins over the prediction.
        let s = slicer(6_000_000, 5000);
        let Plan::Sliced(p) = s.plan([60_000, 1, 1], Some(100_000_000)) else {
            panic!("sliced");
        };
        assert_eq!(p.total(), 12);
    }

    #[test]
    fn parts_never_have_fewer_blocks_than_the_minimum_but_the_last() {
        let s = slicer(1_000, 1500);
        let Plan::Sliced(p) = s.plan([700, 700, 1], Some(1_000_000_000)) else {
            panic!("sliced");
        };
        let parts: Vec<_> = p.collect();
        for q in &parts[..parts.len() - 1] {
            assert!(q.blocks() >= 1500, "{q:?}");
        }
        // A very long grid without history is sliced at the minimum.
        assert!(matches!(s.plan([700, 700, 1], None), Plan::Sliced(_)));
    }

    proptest! {
        /// Every block of the grid is in exactly one part, each part lies
        /// inside the grid, and total() is the number of parts.
        #[test]
        fn parts_tile_the_grid(gx in 1u32..40, gy in 1u32..12, gz in 1u32..6, chunk in 1u64..600) {
            let grid = [gx, gy, gz];
            let parts = Parts::new(grid, chunk);
            let n = parts.total();
            let mut seen = vec![0u8; (gx * gy * gz) as usize];
            let mut k = 0;
            for p in parts {
                k += 1;
                prop_assert!(p.fits(grid), "{:?}", p);
                for z in p.offset[2]..p.offset[2] + p.extent[2] {
                    for y in p.offset[1]..p.offset[1] + p.extent[1] {
                        for x in p.offset[0]..p.offset[0] + p.extent[0] {
                            seen[((z * gy + y) * gx + x) as usize] += 1;
                        }
                    }
                }
            }
            prop_assert_eq!(k, n);
            prop_assert!(seen.iter().all(|&c| c == 1));
        }
    }
}
