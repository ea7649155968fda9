//! The hooks NVIDIA's export tables call back into (`export_tables`):
//! the driver version, the device, the primary and current context, and
//! module loads, answered by the rest of the library so that every answer
//! agrees with the exported entry points.

use crate::state::{device, DRIVER_VERSION};
use crate::types::{err, CUresult};

/// What the export tables need from the rest of the library; every answer
/// is guest-local and agrees with the exported entry points (the integrity
/// check hashes them).
struct Hooks;

impl crate::export_tables::DriverHooks for Hooks {
    fn driver_version(&self) -> i32 {
        DRIVER_VERSION
    }

    fn device_count(&self) -> Result<i32, CUresult> {
        device().map(|_| 1)
    }

    fn device_uuid(&self, ordinal: i32) -> Result<[u8; 16], CUresult> {
        match ordinal {
            0 => device().map(|d| d.uuid),
            _ => Err(err::INVALID_DEVICE),
        }
    }

    fn pci_location(&self, ordinal: i32) -> Result<crate::export_tables::PciLocation, CUresult> {
        if ordinal != 0 {
            return Err(err::INVALID_DEVICE);
        }
        let d = device()?;
        Ok(crate::export_tables::PciLocation {
            domain: d.attribute(50)?,
            bus: d.attribute(33)?,
            device: d.attribute(34)?,
        })
    }

    fn primary_context(
        &self,
        dev: crate::types::CUdevice,
    ) -> Result<crate::types::CUcontext, CUresult> {
        device()?;
        match dev {
            0 => Ok(crate::context::primary()),
            _ => Err(err::INVALID_DEVICE),
        }
    }

    fn current_context(&self) -> Result<crate::types::CUcontext, CUresult> {
        Ok(crate::context::current())
    }

    fn context_id(&self, ctx: crate::types::CUcontext) -> Result<u64, CUresult> {
        Ok(ctx as usize as u64)
    }

    unsafe fn load_module(
        &self,
        image: *const std::ffi::c_void,
    ) -> Result<crate::types::CUmodule, CUresult> {
        crate::module::load(image).map(|m| m.cast())
    }
}

/// Installs the hooks the export tables call (first call wins).
pub fn install_hooks() {
    static HOOKS: Hooks = Hooks;
    let _ = crate::export_tables::set_hooks(&HOOKS);
}
