//! Samplers: host samplers with the guest's record of how they were made.
//!
//! A sampler reaches a kernel as a `KernelArg::Sampler` of its host handle
//! ([`crate::kernel`]); `clGetSamplerInfo` is answered here.

use std::ffi::c_void;
use std::sync::Arc;

use fairgpu_protocol::Opcode;

use crate::context::{read_props, Context};
use crate::registry::{self, ParentRef};
use crate::types::*;
use crate::{conn, guard, guard_obj, raw};

/// A sampler's state.
#[derive(Debug)]
pub struct Sampler {
    /// Its context (counted).
    pub context: ParentRef,
    /// `CL_SAMPLER_NORMALIZED_COORDS`.
    pub normalized: bool,
    /// `CL_SAMPLER_ADDRESSING_MODE`.
    pub addressing: u32,
    /// `CL_SAMPLER_FILTER_MODE`.
    pub filter: u32,
    /// The property list given to `clCreateSamplerWithProperties`, with its
    /// terminator (empty for `clCreateSampler`).
    pub props: Vec<u64>,
    /// The host's sampler.
    pub host: u64,
}

impl Drop for Sampler {
    fn drop(&mut self) {
        conn::release_later(Opcode::ClReleaseSampler, self.host);
    }
}

/// The sampler's settings, checked: a known addressing and filter mode.
pub fn check_sampler(addressing: u32, filter: u32) -> Result<(), i32> {
    if !(CL_ADDRESS_NONE..=CL_ADDRESS_MIRRORED_REPEAT).contains(&addressing)
        || !matches!(filter, CL_FILTER_NEAREST | CL_FILTER_LINEAR)
    {
        return Err(CL_INVALID_VALUE);
    }
    Ok(())
}

/// The settings of a `clCreateSamplerWithProperties` list (pairs, with the
/// terminator): each property at most once, defaults for the others
/// (normalized coordinates, clamp, nearest).
pub fn sampler_props(list: &[u64]) -> Result<(bool, u32, u32), i32> {
    let (mut norm, mut addr, mut filter) = (None, None, None);
    for pair in list.chunks_exact(2) {
        let slot = match u32::try_from(pair[0]) {
            Ok(CL_SAMPLER_NORMALIZED_COORDS) => &mut norm,
            Ok(CL_SAMPLER_ADDRESSING_MODE) => &mut addr,
            Ok(CL_SAMPLER_FILTER_MODE) => &mut filter,
            _ => return Err(CL_INVALID_VALUE),
        };
        if slot.is_some() {
            return Err(CL_INVALID_VALUE);
        }
        *slot = Some(u32::try_from(pair[1]).map_err(|_| CL_INVALID_VALUE)?);
    }
    let norm = match norm {
        None | Some(CL_TRUE) => true,
        Some(CL_FALSE) => false,
        Some(_) => return Err(CL_INVALID_VALUE),
    };
    Ok((
        norm,
        addr.unwrap_or(CL_ADDRESS_CLAMP),
        filter.unwrap_or(CL_FILTER_NEAREST),
    ))
}

fn new_sampler(
    context: Handle,
    normalized: bool,
    addressing: u32,
    filter: u32,
    props: Vec<u64>,
) -> Result<Handle, i32> {
    let ctx = ParentRef::new::<Context>(context)?;
    check_sampler(addressing, filter)?;
    let r = conn::with(|c| {
        c.call(
            Opcode::ClCreateSampler,
            &[
                u64::from(normalized),
                u64::from(addressing),
                u64::from(filter),
            ],
            &[],
            &mut [],
        )
    })?;
    Ok(registry::create(Arc::new(Sampler {
        context: ctx,
        normalized,
        addressing,
        filter,
        props,
        host: r.vals[0],
    })))
}

pub(crate) extern "C" fn clCreateSampler(
    context: Handle,
    normalized_coords: u32,
    addressing_mode: u32,
    filter_mode: u32,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateSampler", errcode_ret, || {
        registry::get::<Context>(context)?;
        let normalized = match normalized_coords {
            CL_FALSE => false,
            CL_TRUE => true,
            _ => return Err(CL_INVALID_VALUE),
        };
        new_sampler(
            context,
            normalized,
            addressing_mode,
            filter_mode,
            Vec::new(),
        )
    })
}

pub(crate) extern "C" fn clCreateSamplerWithProperties(
    context: Handle,
    properties: *const u64,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateSamplerWithProperties", errcode_ret, || {
        registry::get::<Context>(context)?;
        // SAFETY: properties is null or the application's 0-terminated list.
        let list = unsafe { read_props(properties) }
            .map_err(|_| CL_INVALID_VALUE)?
            .unwrap_or_default();
        let (norm, addr, filter) = sampler_props(&list)?;
        new_sampler(context, norm, addr, filter, list)
    })
}

pub(crate) extern "C" fn clRetainSampler(sampler: Handle) -> i32 {
    guard("clRetainSampler", || registry::retain::<Sampler>(sampler))
}

pub(crate) extern "C" fn clReleaseSampler(sampler: Handle) -> i32 {
    guard("clReleaseSampler", || registry::release::<Sampler>(sampler))
}

pub(crate) extern "C" fn clGetSamplerInfo(
    sampler: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    guard("clGetSamplerInfo", || {
        let s = registry::get::<Sampler>(sampler)?;
        let v = match param {
            CL_SAMPLER_REFERENCE_COUNT => {
                registry::refs::<Sampler>(sampler)?.to_ne_bytes().to_vec()
            }
            CL_SAMPLER_CONTEXT => (s.context.handle() as usize).to_ne_bytes().to_vec(),
            CL_SAMPLER_NORMALIZED_COORDS => u32::from(s.normalized).to_ne_bytes().to_vec(),
            CL_SAMPLER_ADDRESSING_MODE => s.addressing.to_ne_bytes().to_vec(),
            CL_SAMPLER_FILTER_MODE => s.filter.to_ne_bytes().to_vec(),
            CL_SAMPLER_PROPERTIES => s.props.iter().flat_map(|p| p.to_ne_bytes()).collect(),
            _ => return Err(CL_INVALID_VALUE),
        };
        // SAFETY: the clGetSamplerInfo output contract.
        unsafe { raw::info(&v, size, value, size_ret) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampler_settings_are_checked() {
        assert_eq!(
            check_sampler(CL_ADDRESS_CLAMP_TO_EDGE, CL_FILTER_NEAREST),
            Ok(())
        );
        assert_eq!(
            check_sampler(CL_ADDRESS_MIRRORED_REPEAT, CL_FILTER_LINEAR),
            Ok(())
        );
        assert_eq!(
            check_sampler(0x1135, CL_FILTER_LINEAR),
            Err(CL_INVALID_VALUE)
        );
        assert_eq!(
            check_sampler(CL_ADDRESS_NONE, 0x1142),
            Err(CL_INVALID_VALUE)
        );
    }

    #[test]
    fn property_lists_default_and_refuse_repeats() {
        assert_eq!(
            sampler_props(&[0]),
            Ok((true, CL_ADDRESS_CLAMP, CL_FILTER_NEAREST))
        );
        let list = [
            u64::from(CL_SAMPLER_NORMALIZED_COORDS),
            0,
            u64::from(CL_SAMPLER_FILTER_MODE),
            u64::from(CL_FILTER_LINEAR),
            0,
        ];
        assert_eq!(
            sampler_props(&list),
            Ok((false, CL_ADDRESS_CLAMP, CL_FILTER_LINEAR))
        );
        let twice = [
            u64::from(CL_SAMPLER_FILTER_MODE),
            u64::from(CL_FILTER_LINEAR),
            u64::from(CL_SAMPLER_FILTER_MODE),
            u64::from(CL_FILTER_NEAREST),
            0,
        ];
        assert_eq!(sampler_props(&twice), Err(CL_INVALID_VALUE));
        assert_eq!(sampler_props(&[0x1155, 0, 0]), Err(CL_INVALID_VALUE));
        assert_eq!(
            sampler_props(&[u64::from(CL_SAMPLER_NORMALIZED_COORDS), 2, 0]),
            Err(CL_INVALID_VALUE)
        );
    }
}
