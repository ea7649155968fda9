//! Rectangular transfers (`clEnqueue{Read,Write,Copy}BufferRect`): the
//! spec's checks of origins, regions and pitches, and the decomposition
//! into contiguous runs that travel as plain transfers.

use crate::types::CL_INVALID_VALUE;

/// One side of a rectangular transfer: where it starts and how its rows
/// and slices are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Origin in bytes, rows, slices.
    pub origin: [usize; 3],
    /// Bytes from one row to the next.
    pub row_pitch: usize,
    /// Bytes from one slice to the next.
    pub slice_pitch: usize,
}

impl Layout {
    /// A side with the spec's defaults for 0 pitches (`row_pitch =
    /// region[0]`, `slice_pitch = region[1] * row_pitch`), checked:
    /// CL_INVALID_VALUE for a pitch below its minimum or a slice pitch that
    /// is not a multiple of the row pitch.
    pub fn new(
        origin: [usize; 3],
        region: [usize; 3],
        row_pitch: usize,
        slice_pitch: usize,
    ) -> Result<Layout, i32> {
        check_region(region)?;
        let row_pitch = match row_pitch {
            0 => region[0],
            p if p < region[0] => return Err(CL_INVALID_VALUE),
            p => p,
        };
        let min_slice = region[1].checked_mul(row_pitch).ok_or(CL_INVALID_VALUE)?;
        let slice_pitch = match slice_pitch {
            0 => min_slice,
            p if p < min_slice || p % row_pitch != 0 => return Err(CL_INVALID_VALUE),
            p => p,
        };
        Ok(Layout {
            origin,
            row_pitch,
            slice_pitch,
        })
    }

    /// Offset of row `y` of slice `z` of the region.
    fn row(&self, y: usize, z: usize) -> usize {
        (self.origin[2] + z) * self.slice_pitch
            + (self.origin[1] + y) * self.row_pitch
            + self.origin[0]
    }

    /// One past the last byte the region touches (`None` on overflow).
    pub fn end(&self, region: [usize; 3]) -> Option<usize> {
        let z = self.origin[2].checked_add(region[2] - 1)?;
        let y = self.origin[1].checked_add(region[1] - 1)?;
        z.checked_mul(self.slice_pitch)?
            .checked_add(y.checked_mul(self.row_pitch)?)?
            .checked_add(self.origin[0])?
            .checked_add(region[0])
    }
}

/// CL_INVALID_VALUE unless every extent of `region` is non-zero.
pub fn check_region(region: [usize; 3]) -> Result<(), i32> {
    if region.contains(&0) {
        Err(CL_INVALID_VALUE)
    } else {
        Ok(())
    }
}

/// A contiguous piece of a rectangular transfer: `len` bytes from offset
/// `a` of one side to offset `b` of the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Offset on the first side.
    pub a: usize,
    /// Offset on the second side.
    pub b: usize,
    /// Bytes.
    pub len: usize,
}

/// The runs of a transfer of `region` between sides `a` and `b` (both
/// checked with [`Layout::end`] first), in row order, with rows that
/// continue each other on both sides merged.
pub fn runs(region: [usize; 3], a: &Layout, b: &Layout) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for z in 0..region[2] {
        for y in 0..region[1] {
            let run = Run {
                a: a.row(y, z),
                b: b.row(y, z),
                len: region[0],
            };
            match out.last_mut() {
                Some(last) if last.a + last.len == run.a && last.b + last.len == run.b => {
                    last.len += run.len
                }
                _ => out.push(run),
            }
        }
    }
    out
}

/// Whether any run's `a` range meets any run's `b` range (a copy within
/// one buffer that would read what it writes).
pub fn overlap(runs: &[Run]) -> bool {
    let mut src: Vec<(usize, usize)> = runs.iter().map(|r| (r.a, r.a + r.len)).collect();
    let mut dst: Vec<(usize, usize)> = runs.iter().map(|r| (r.b, r.b + r.len)).collect();
    src.sort_unstable();
    dst.sort_unstable();
    let (mut i, mut j) = (0, 0);
    while i < src.len() && j < dst.len() {
        let (s, d) = (src[i], dst[j]);
        if s.0 < d.1 && d.0 < s.1 {
            return true;
        }
        if s.1 <= d.1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pitches_default_and_are_checked() {
        let l = Layout::new([0; 3], [4, 3, 2], 0, 0).unwrap();
        assert_eq!((l.row_pitch, l.slice_pitch), (4, 12));
        let l = Layout::new([0; 3], [4, 3, 2], 8, 0).unwrap();
        assert_eq!((l.row_pitch, l.slice_pitch), (8, 24));
        assert_eq!(Layout::new([0; 3], [4, 3, 2], 3, 0), Err(CL_INVALID_VALUE));
        assert_eq!(Layout::new([0; 3], [4, 3, 2], 8, 16), Err(CL_INVALID_VALUE));
        assert_eq!(Layout::new([0; 3], [4, 3, 2], 8, 36), Err(CL_INVALID_VALUE));
        assert!(Layout::new([0; 3], [4, 3, 2], 8, 32).is_ok());
        assert_eq!(Layout::new([0; 3], [4, 0, 2], 0, 0), Err(CL_INVALID_VALUE));
    }

    #[test]
    fn the_end_is_one_past_the_last_byte() {
        let l = Layout::new([1, 2, 1], [4, 3, 2], 10, 100).unwrap();
        // Last row: slice 2, row 4, bytes 1..5.
        assert_eq!(l.end([4, 3, 2]), Some(2 * 100 + 4 * 10 + 1 + 4));
        let huge = Layout {
            origin: [0, 0, usize::MAX / 2],
            row_pitch: 1,
            slice_pitch: 4,
        };
        assert_eq!(huge.end([1, 1, 2]), None);
    }

    #[test]
    fn rows_decompose_and_contiguous_rows_merge() {
        let region = [4, 3, 2];
        let buf = Layout::new([2, 1, 0], region, 16, 64).unwrap();
        let host = Layout::new([0; 3], region, 0, 0).unwrap();
        let r = runs(region, &buf, &host);
        assert_eq!(r.len(), 6);
        assert_eq!(
            r[0],
            Run {
                a: 16 + 2,
                b: 0,
                len: 4
            }
        );
        assert_eq!(
            r[1],
            Run {
                a: 32 + 2,
                b: 4,
                len: 4
            }
        );
        assert_eq!(
            r[3],
            Run {
                a: 64 + 16 + 2,
                b: 12,
                len: 4
            }
        );
        // Both sides packed: one run.
        let a = Layout::new([0, 0, 1], region, 0, 0).unwrap();
        let b = Layout::new([0; 3], region, 0, 0).unwrap();
        assert_eq!(
            runs(region, &a, &b),
            [Run {
                a: 12,
                b: 0,
                len: 24
            }]
        );
        // Packed rows, padded slices: one run per slice.
        let c = Layout::new([0; 3], region, 4, 16).unwrap();
        assert_eq!(
            runs(region, &c, &b),
            [
                Run {
                    a: 0,
                    b: 0,
                    len: 12
                },
                Run {
                    a: 16,
                    b: 12,
                    len: 12
                }
            ]
        );
        // Every byte of the region once.
        let total: usize = r.iter().map(|r| r.len).sum();
        assert_eq!(total, 24);
    }

    #[test]
    fn overlapping_runs_are_found() {
        let r = |a, b, len| Run { a, b, len };
        assert!(!overlap(&[r(0, 8, 8)]));
        assert!(overlap(&[r(0, 4, 8)]));
        assert!(!overlap(&[r(0, 16, 4), r(8, 24, 4)]));
        assert!(overlap(&[r(0, 16, 4), r(18, 40, 4)]));
        assert!(!overlap(&[r(0, 4, 4), r(16, 20, 4)]));
    }
}
