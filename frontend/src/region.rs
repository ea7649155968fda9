//! Finding, mapping and validating the region from the guest side.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fairgpu_protocol::layout::{Layout, RegionHeader, MAGIC};
use fairgpu_protocol::region::RegionView;

use crate::map::{ivshmem_bars, Mapping};
use crate::OpenError;

/// Environment variable naming the region file in local mode.
pub const REGION_ENV: &str = "FAIRGPU_REGION";

/// A mapped region whose header passed validation.
#[derive(Debug)]
pub struct GuestRegion {
    view: RegionView,
    layout: Layout,
    path: PathBuf,
}

impl GuestRegion {
    /// Maps the region at `path` (a shm file or an ivshmem `resource2`) and
    /// validates its header.
    pub fn open(path: &Path) -> Result<Arc<GuestRegion>, OpenError> {
        let map = Mapping::open(path).map_err(|source| OpenError::Map {
            path: path.to_owned(),
            source,
        })?;
        let view = map.view();
        // Acquire: pairs with the host's Release store of the magic, which it
        // writes after every other header field.
        let magic = view.atomic_u64(0).map_err(|_| OpenError::TooSmall {
            path: path.to_owned(),
        })?;
        if magic.load(Ordering::Acquire) != MAGIC {
            return Err(OpenError::NotARegion {
                path: path.to_owned(),
            });
        }
        let header: RegionHeader = view.read_obj(0).map_err(|_| OpenError::TooSmall {
            path: path.to_owned(),
        })?;
        let layout = Layout::from_header(&header, view.len() as u64).map_err(|source| {
            OpenError::Layout {
                path: path.to_owned(),
                source,
            }
        })?;
        Ok(Arc::new(GuestRegion {
            view,
            layout,
            path: path.to_owned(),
        }))
    }

    /// The region named by `FAIRGPU_REGION`, else the first ivshmem device
    /// whose BAR2 holds a fairgpu region.
    pub fn discover() -> Result<Arc<GuestRegion>, OpenError> {
        if let Some(p) = std::env::var_os(REGION_ENV) {
            return Self::open(Path::new(&p));
        }
        let mut last = None;
        for bar in ivshmem_bars(Path::new("/sys/bus/pci/devices")) {
            match Self::open(&bar) {
                Ok(r) => return Ok(r),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(OpenError::NoRegion))
    }

    /// The validated layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The view of the whole region.
    pub fn view(&self) -> &RegionView {
        &self.view
    }

    /// Where the region was mapped from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
