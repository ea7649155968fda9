//! Device queries, answered from what `cuInit` cached.

use std::ffi::c_char;

use crate::context::out;
use crate::state::{self, DRIVER_VERSION};
use crate::types::{err, CUdevice, CUresult};
use crate::{ffi_result, state::DeviceInfo};

fn dev0(dev: CUdevice) -> Result<&'static DeviceInfo, CUresult> {
    let info = state::device()?;
    if dev == 0 {
        Ok(info)
    } else {
        Err(err::INVALID_DEVICE)
    }
}

/// `cuInit`: maps the region, claims a channel, caches the device.
#[no_mangle]
pub extern "C" fn cuInit(flags: u32) -> CUresult {
    ffi_result(|| {
        if flags != 0 {
            return Err(err::INVALID_VALUE);
        }
        crate::hooks::install_hooks();
        state::init().map(|_| ())
    })
}

/// `cuDriverGetVersion`: the ABI this library implements.
#[no_mangle]
pub extern "C" fn cuDriverGetVersion(version: *mut i32) -> CUresult {
    // SAFETY: caller passes a writable slot (checked for null).
    ffi_result(|| unsafe { out(version, DRIVER_VERSION) })
}

/// `cuDeviceGetCount`.
#[no_mangle]
pub extern "C" fn cuDeviceGetCount(count: *mut i32) -> CUresult {
    ffi_result(|| {
        state::device()?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(count, 1) }
    })
}

/// `cuDeviceGet`.
#[no_mangle]
pub extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: i32) -> CUresult {
    ffi_result(|| {
        dev0(ordinal)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(device, 0) }
    })
}

/// `cuDeviceGetName`: NUL-terminated, truncated to `len`.
#[no_mangle]
pub extern "C" fn cuDeviceGetName(name: *mut c_char, len: i32, dev: CUdevice) -> CUresult {
    ffi_result(|| {
        let info = dev0(dev)?;
        if name.is_null() || len <= 0 {
            return Err(err::INVALID_VALUE);
        }
        let bytes = info.name.as_bytes();
        let n = bytes.len().min(len as usize - 1);
        // SAFETY: the caller's buffer holds `len` bytes; we write n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), name.cast::<u8>(), n);
            name.add(n).write(0);
        }
        Ok(())
    })
}

fn total_mem(bytes: *mut usize, dev: CUdevice) -> CUresult {
    ffi_result(|| {
        let info = dev0(dev)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(bytes, info.total_mem as usize) }
    })
}

/// `cuDeviceTotalMem` (legacy ABI).
#[no_mangle]
pub extern "C" fn cuDeviceTotalMem(bytes: *mut usize, dev: CUdevice) -> CUresult {
    total_mem(bytes, dev)
}

/// `cuDeviceTotalMem_v2`.
#[no_mangle]
pub extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    total_mem(bytes, dev)
}

/// `cuDeviceGetAttribute`.
#[no_mangle]
pub extern "C" fn cuDeviceGetAttribute(value: *mut i32, attrib: i32, dev: CUdevice) -> CUresult {
    ffi_result(|| {
        let v = dev0(dev)?.attribute(attrib).inspect_err(|e| {
            if crate::log_level() >= crate::LogLevel::Trace {
                eprintln!("fairgpu guest-lib: cuDeviceGetAttribute({attrib}): status {e}");
            }
        })?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(value, v) }
    })
}

fn uuid(out_uuid: *mut [u8; 16], dev: CUdevice) -> CUresult {
    ffi_result(|| {
        let info = dev0(dev)?;
        // SAFETY: caller passes a writable 16-byte CUuuid (checked for null).
        unsafe { out(out_uuid, info.uuid) }
    })
}

/// `cuDeviceGetUuid`.
#[no_mangle]
pub extern "C" fn cuDeviceGetUuid(out_uuid: *mut [u8; 16], dev: CUdevice) -> CUresult {
    uuid(out_uuid, dev)
}

/// `cuDeviceGetUuid_v2`.
#[no_mangle]
pub extern "C" fn cuDeviceGetUuid_v2(out_uuid: *mut [u8; 16], dev: CUdevice) -> CUresult {
    uuid(out_uuid, dev)
}

/// `cuDeviceComputeCapability` (deprecated, still used by old code).
#[no_mangle]
pub extern "C" fn cuDeviceComputeCapability(
    major: *mut i32,
    minor: *mut i32,
    dev: CUdevice,
) -> CUresult {
    ffi_result(|| {
        let info = dev0(dev)?;
        // SAFETY: caller passes writable slots (checked for null).
        unsafe {
            out(major, info.attribute(75)?)?;
            out(minor, info.attribute(76)?)
        }
    })
}

/// `cuDeviceGetPCIBusId`: "domain:bus:device.0" from the PCI attributes.
#[no_mangle]
pub extern "C" fn cuDeviceGetPCIBusId(bus_id: *mut c_char, len: i32, dev: CUdevice) -> CUresult {
    ffi_result(|| {
        let info = dev0(dev)?;
        let s = format!(
            "{:04x}:{:02x}:{:02x}.0",
            info.attribute(50)?,
            info.attribute(33)?,
            info.attribute(34)?
        );
        if bus_id.is_null() || len <= 0 {
            return Err(err::INVALID_VALUE);
        }
        let n = s.len().min(len as usize - 1);
        // SAFETY: the caller's buffer holds `len` bytes; we write n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), bus_id.cast::<u8>(), n);
            bus_id.add(n).write(0);
        }
        Ok(())
    })
}

/// `cuDeviceGetByPCIBusId`: device 0 when the id names its PCI address
/// (`[domain:]bus:device[.function]`, hexadecimal, as `cuDeviceGetPCIBusId`
/// writes it), else INVALID_VALUE.
#[no_mangle]
pub extern "C" fn cuDeviceGetByPCIBusId(dev: *mut CUdevice, bus_id: *const c_char) -> CUresult {
    ffi_result(|| {
        let info = state::device()?;
        if bus_id.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: the API passes a NUL-terminated string.
        let text = unsafe { std::ffi::CStr::from_ptr(bus_id) }
            .to_str()
            .map_err(|_| err::INVALID_VALUE)?;
        let want = (
            info.attribute(50)?,
            info.attribute(33)?,
            info.attribute(34)?,
        );
        if parse_bus_id(text) != Some(want) {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(dev, 0) }
    })
}

/// (domain, bus, device) of a PCI bus id; the function must be 0.
fn parse_bus_id(text: &str) -> Option<(i32, i32, i32)> {
    let hex = |s: &str| i32::from_str_radix(s, 16).ok().filter(|v| *v >= 0);
    let (addr, function) = match text.rsplit_once('.') {
        Some((a, f)) => (a, hex(f)?),
        None => (text, 0),
    };
    if function != 0 {
        return None;
    }
    let parts: Vec<&str> = addr.split(':').collect();
    match parts[..] {
        [bus, device] => Some((0, hex(bus)?, hex(device)?)),
        [domain, bus, device] => Some((hex(domain)?, hex(bus)?, hex(device)?)),
        _ => None,
    }
}

/// `cuDeviceGetTexture1DLinearMaxWidth`: the device's 1D linear texture
/// width limit (MAXIMUM_TEXTURE1D_LINEAR_WIDTH), for any valid format and
/// channel count.
#[no_mangle]
pub extern "C" fn cuDeviceGetTexture1DLinearMaxWidth(
    width: *mut usize,
    format: u32,
    channels: u32,
    dev: CUdevice,
) -> CUresult {
    /// `CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH`.
    const MAXIMUM_TEXTURE1D_LINEAR_WIDTH: i32 = 69;
    ffi_result(|| {
        let info = dev0(dev)?;
        if fairgpu_protocol::array::format_bytes(format).is_none() || !matches!(channels, 1 | 2 | 4)
        {
            return Err(err::INVALID_VALUE);
        }
        let w = info.attribute(MAXIMUM_TEXTURE1D_LINEAR_WIDTH)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(width, usize::try_from(w).unwrap_or(0)) }
    })
}

#[cfg(test)]
mod tests {
    use super::parse_bus_id;

    #[test]
    fn bus_ids_parse_as_the_driver_writes_and_reads_them() {
        assert_eq!(parse_bus_id("0000:65:00.0"), Some((0, 0x65, 0)));
        assert_eq!(parse_bus_id("0001:0a:1f.0"), Some((1, 0xa, 0x1f)));
        assert_eq!(parse_bus_id("65:00.0"), Some((0, 0x65, 0)));
        assert_eq!(parse_bus_id("65:00"), Some((0, 0x65, 0)));
        assert_eq!(parse_bus_id("0000:65:00.1"), None, "function 1");
        assert_eq!(parse_bus_id("garbage"), None);
        assert_eq!(parse_bus_id("0000:zz:00.0"), None);
        assert_eq!(parse_bus_id(""), None);
    }
}
