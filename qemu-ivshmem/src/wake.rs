//! The host end of a guest's doorbell: turns the host peer's eventfd
//! ([`crate::Event::Doorbell`]) into the wake a host serving loop blocked on
//! the region's `doorbell` futex word expects (docs/wire-protocol.md,
//! section 8), as a guest in local mode would deliver it.
//!
//! The futex is keyed by the region file's page, so the waker may live in
//! another process than the serving loop (the daemon next to a worker) as
//! long as both map the same file.

use std::path::Path;
use std::sync::atomic::Ordering;

use fairgpu_frontend::futex;
use fairgpu_frontend::map::Mapping;
use fairgpu_protocol::layout::DOORBELL_OFF;
use fairgpu_protocol::region::RegionView;

/// Why a region could not be mapped for waking.
#[derive(Debug, thiserror::Error)]
pub enum WakeError {
    /// Mapping the file failed.
    #[error("mapping {path} to wake its host")]
    Map {
        /// The region file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is too small to hold the doorbell word.
    #[error("{0} is too small to be a fairgpu region")]
    TooSmall(std::path::PathBuf),
}

/// Wakes the host serving a region.
#[derive(Debug)]
pub struct HostWaker {
    view: RegionView,
}

impl HostWaker {
    /// Maps the region at `path` (a region file, or
    /// [`crate::SharedMemory::proc_path`]).
    pub fn open(path: &Path) -> Result<HostWaker, WakeError> {
        let map = Mapping::open(path).map_err(|source| WakeError::Map {
            path: path.to_owned(),
            source,
        })?;
        let view = map.view();
        view.atomic_u32(DOORBELL_OFF)
            .map_err(|_| WakeError::TooSmall(path.to_owned()))?;
        Ok(HostWaker { view })
    }

    /// Changes the doorbell word and wakes whoever blocks on it.
    pub fn wake(&self) {
        let bell = self.view.atomic_u32(DOORBELL_OFF).expect("checked in open");
        // Release: makes the value change visible before the wake, so a
        // host between loading the word and FUTEX_WAIT returns at once.
        bell.fetch_add(1, Ordering::Release);
        futex::wake(bell, i32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn wakes_a_futex_waiter_on_the_doorbell_word() {
        let path = std::env::temp_dir().join(format!("fairgpu-wake-{}", std::process::id()));
        let map = Mapping::create(&path, 4096).unwrap();
        let waker = HostWaker::open(&path).unwrap();
        let view = map.view();
        let waiter = std::thread::spawn(move || {
            let bell = view.atomic_u32(DOORBELL_OFF).unwrap();
            let start = Instant::now();
            // The host's block: wait while the word is unchanged.
            while bell.load(Ordering::Acquire) == 0 && start.elapsed() < Duration::from_secs(10) {
                futex::wait(bell, 0, Duration::from_secs(10));
            }
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        waker.wake();
        let waited = waiter.join().unwrap();
        assert!(waited < Duration::from_secs(5), "woken after {waited:?}");
        std::fs::remove_file(&path).unwrap();
        let small = std::env::temp_dir().join(format!("fairgpu-wake-small-{}", std::process::id()));
        std::fs::write(&small, [0u8; 16]).unwrap();
        assert!(matches!(
            HostWaker::open(&small),
            Err(WakeError::TooSmall(_))
        ));
        std::fs::remove_file(&small).unwrap();
    }
}
