//! The `[sim]` configuration and the kernel cost model it defines.
//!
//! A kernel's modelled duration comes from its `[[sim.kernels]]` entry if it
//! has one; a kernel without one that SimGpu executes (its PTX interpreter)
//! lasts `executed_base_us + instructions / executed_instructions_per_us`
//! microseconds, `instructions` being what the interpreter executed summed
//! over all threads: deterministic, and independent of how fast the host
//! interpreted it. Whether a kernel executes is `execute` of its entry:
//! default `true`, except for the built-in [`SPIN_KERNEL`], whose whole
//! point is to spin on a clock for the duration its parameter gives.

use std::collections::HashMap;

use fairgpu_protocol::cuda::{ParamInfo, MAX_NAME, MAX_PARAMS};
use serde::{Deserialize, Serialize};

use crate::{ExecError, ExecResult};

/// The kernel every SimGpu knows without configuration: it runs for as many
/// nanoseconds as its first parameter (a u64) says.
pub const SPIN_KERNEL: &str = "fairgpu_spin";
/// Longest modelled kernel: a launch asking for more is refused, so one
/// guest cannot book the shared device for hours with a single launch.
pub const MAX_KERNEL_NS: u64 = 60 * 1_000_000_000;
/// Longest device name (the protocol's limit).
const MAX_DEVICE_NAME: usize = fairgpu_protocol::cuda::MAX_DEVICE_NAME;

/// The device shape and cost model of SimGpu, the `[sim]` table of the
/// configuration file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Device memory in bytes (default 16 GiB).
    pub memory_bytes: u64,
    /// Device name the guest sees.
    pub name: String,
    /// Multiprocessor count the guest sees.
    pub sm_count: u32,
    /// How long kernels take, by name.
    pub kernels: Vec<KernelCost>,
    /// Instructions (summed over threads) one executed launch may run on
    /// the worker's CPU before it fails with CUDA_ERROR_LAUNCH_TIMEOUT;
    /// each block's setup counts too (`fairgpu_ptx::Limits`).
    pub max_instructions: u64,
    /// Modelled duration of an executed kernel the cost model does not
    /// list, before its instructions are counted, µs.
    pub executed_base_us: f64,
    /// Modelled throughput for executed kernels the cost model does not
    /// list: instructions (summed over threads) per µs of device time.
    pub executed_instructions_per_us: u64,
    /// Whether a sticky error (a faulting kernel) poisons every context of
    /// the worker's process, new ones included, as a real CUDA driver does
    /// (`cuCtxCreate` then fails with the same error), instead of only the
    /// faulting context. Default `false`; `true` models a GPU faithfully
    /// and exercises the worker's recycling after a sticky error.
    pub sticky_poisons_process: bool,
    /// Host threads the blocks of one executed launch may run on, for
    /// kernels whose blocks do not talk to each other and launches long
    /// enough to gain; 0 (the default): the worker's CPUs, at most 8; 1:
    /// every launch on the worker's own thread.
    pub threads: u32,
}

/// Most [`SimConfig::threads`].
pub const MAX_THREADS: u32 = 64;

/// Default [`SimConfig::max_instructions`]: at the 30 to 80 million
/// instructions per second the interpreter runs at on one core
/// (docs/results.md), a launch takes at most about 6 to 17 s of the
/// worker's CPU; a 256x256 tiled matrix multiplication takes 65 million.
pub const DEFAULT_MAX_INSTRUCTIONS: u64 = 500_000_000;
/// Largest [`SimConfig::max_instructions`].
pub const MAX_MAX_INSTRUCTIONS: u64 = 1_000_000_000_000;
/// Default [`SimConfig::executed_base_us`]: about what the shortest kernel
/// takes on a GPU, launch included.
pub const DEFAULT_EXECUTED_BASE_US: f64 = 2.0;
/// Default [`SimConfig::executed_instructions_per_us`]: 10^13 thread
/// instructions per second, about a third of an H100's issue rate (132 SMs
/// × 128 lanes × 1.98 GHz), for kernels that also wait on memory.
pub const DEFAULT_EXECUTED_INSTRUCTIONS_PER_US: u64 = 10_000_000;

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            memory_bytes: 16 << 30,
            name: "fairgpu SimGpu".into(),
            sm_count: 132,
            kernels: Vec::new(),
            max_instructions: DEFAULT_MAX_INSTRUCTIONS,
            executed_base_us: DEFAULT_EXECUTED_BASE_US,
            executed_instructions_per_us: DEFAULT_EXECUTED_INSTRUCTIONS_PER_US,
            sticky_poisons_process: false,
            threads: 0,
        }
    }
}

/// The modelled duration of one kernel. Exactly one of `duration_us`,
/// `duration_param` and `duration_hash` is set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelCost {
    /// Entry name: exact (possibly mangled), or the base name of a simple
    /// Itanium-mangled name (`spin` matches `_Z4spinm`).
    pub name: String,
    /// Fixed duration in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_us: Option<f64>,
    /// Index of the parameter holding the duration in nanoseconds, a
    /// little-endian u64 (or u32 if the parameter has 4 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_param: Option<usize>,
    /// Duration derived from every byte of the packed parameter buffer:
    /// [`HASH_BASE_NS`] + FNV-1a 64 of the bytes modulo [`HASH_SPAN_NS`].
    /// A program that computes the same over the arguments it passed can
    /// check, through event timing, that the host received exactly them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duration_hash: bool,
    /// The kernel faults, as one that dereferences a bad address on a GPU:
    /// its launch fails with CUDA_ERROR_ILLEGAL_ADDRESS and the error is
    /// sticky, failing every later call of that context.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fault: bool,
    /// Whether SimGpu runs the kernel's code (its PTX interpreter) at each
    /// launch, so that it changes memory as on a GPU. Default `true`,
    /// except for [`SPIN_KERNEL`]; `false` makes the kernel timing-only (it
    /// changes no memory), for kernels that spin on a clock. A faulting
    /// kernel never executes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execute: Option<bool>,
}

/// Shortest duration of a `duration_hash` kernel, ns.
pub const HASH_BASE_NS: u64 = 100_000;
/// Range of `duration_hash` durations above the base, ns.
pub const HASH_SPAN_NS: u64 = 1_000_000;

/// FNV-1a 64 of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl SimConfig {
    /// Checks the values serde cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.memory_bytes == 0 {
            return Err("sim.memory_bytes must be positive".into());
        }
        if self.name.is_empty() || self.name.len() > MAX_DEVICE_NAME {
            return Err(format!(
                "sim.name must have 1 to {MAX_DEVICE_NAME} bytes, has {}",
                self.name.len()
            ));
        }
        if self.sm_count == 0 || self.sm_count > i32::MAX as u32 {
            return Err(format!(
                "sim.sm_count must be in 1..={}, is {}",
                i32::MAX,
                self.sm_count
            ));
        }
        if !(1..=MAX_MAX_INSTRUCTIONS).contains(&self.max_instructions) {
            return Err(format!(
                "sim.max_instructions must be in 1..={MAX_MAX_INSTRUCTIONS}, is {}",
                self.max_instructions
            ));
        }
        if !(0.0..=MAX_KERNEL_NS as f64 / 1e3).contains(&self.executed_base_us) {
            return Err(format!(
                "sim.executed_base_us must be in 0..={}, is {}",
                MAX_KERNEL_NS / 1000,
                self.executed_base_us
            ));
        }
        if self.threads > MAX_THREADS {
            return Err(format!(
                "sim.threads must be in 0..={MAX_THREADS} (0: the host's CPUs, at most 8), is {}",
                self.threads
            ));
        }
        if self.executed_instructions_per_us == 0 {
            return Err("sim.executed_instructions_per_us must be positive".into());
        }
        let mut seen = std::collections::HashSet::new();
        for k in &self.kernels {
            k.validate()?;
            if !seen.insert(k.name.as_str()) {
                return Err(format!("sim kernel {:?} is configured twice", k.name));
            }
        }
        Ok(())
    }
}

impl KernelCost {
    fn validate(&self) -> Result<(), String> {
        let name = &self.name;
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(format!(
                "sim kernel names must have 1 to {MAX_NAME} bytes, {name:?} has {}",
                name.len()
            ));
        }
        if self.fault && self.execute == Some(true) {
            return Err(format!(
                "sim kernel {name:?}: a faulting kernel never executes; drop execute"
            ));
        }
        let set = usize::from(self.duration_us.is_some())
            + usize::from(self.duration_param.is_some())
            + usize::from(self.duration_hash)
            + usize::from(self.fault);
        match (self.duration_us, self.duration_param) {
            _ if set > 1 => Err(format!(
                "sim kernel {name:?}: set only one of duration_us, duration_param, duration_hash and fault"
            )),
            (None, None) if !self.duration_hash && !self.fault => Err(format!(
                "sim kernel {name:?}: set duration_us (fixed), duration_param (read from a parameter) \
                 or duration_hash (from all parameter bytes)"
            )),
            (Some(us), None) if !(0.0..=MAX_KERNEL_NS as f64 / 1e3).contains(&us) => {
                Err(format!(
                    "sim kernel {name:?}: duration_us must be in 0..={}, is {us}",
                    MAX_KERNEL_NS / 1000
                ))
            }
            (None, Some(p)) if p >= MAX_PARAMS => Err(format!(
                "sim kernel {name:?}: duration_param must be below {MAX_PARAMS}, is {p}"
            )),
            _ => Ok(()),
        }
    }
}

/// How a kernel's duration is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cost {
    /// Fixed, in ns.
    Fixed(u64),
    /// Nanoseconds in parameter number `.0`.
    Param(usize),
    /// From a hash of the whole parameter buffer.
    Hash,
    /// The kernel faults (sticky CUDA_ERROR_ILLEGAL_ADDRESS).
    Fault,
}

impl Cost {
    /// The modelled duration of a launch with packed `params` laid out as
    /// `layout` (the caller checked `params` covers the layout).
    pub(crate) fn duration_ns(self, layout: &[ParamInfo], params: &[u8]) -> ExecResult<u64> {
        let ns = match self {
            Cost::Fixed(ns) => ns,
            Cost::Fault => 0,
            Cost::Hash => {
                let len = ParamInfo::packed_size(layout) as usize;
                let bytes = params.get(..len).ok_or(ExecError::Invalid(
                    "parameter buffer shorter than the kernel's parameter layout",
                ))?;
                HASH_BASE_NS + fnv1a64(bytes) % HASH_SPAN_NS
            }
            Cost::Param(i) => {
                let p = layout.get(i).ok_or(ExecError::Invalid(
                    "duration parameter index beyond the kernel's parameters",
                ))?;
                let at = p.offset as usize;
                let bytes = params.get(at..at.saturating_add(p.size as usize)).ok_or(
                    ExecError::Invalid(
                        "parameter buffer shorter than the kernel's parameter layout",
                    ),
                )?;
                match bytes.len() {
                    8 => u64::from_le_bytes(bytes.try_into().unwrap_or([0; 8])),
                    4 => u64::from(u32::from_le_bytes(bytes.try_into().unwrap_or([0; 4]))),
                    _ => {
                        return Err(ExecError::Invalid(
                            "duration parameter is neither 4 nor 8 bytes",
                        ))
                    }
                }
            }
        };
        if ns > MAX_KERNEL_NS {
            return Err(ExecError::Invalid("modelled kernel duration above 60 s"));
        }
        Ok(ns)
    }
}

/// What the cost model says about one kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KernelModel {
    /// Its configured cost; `None`: derived from what it executes.
    pub(crate) cost: Option<Cost>,
    /// Whether launches run its code.
    pub(crate) execute: bool,
}

/// The configured costs, compiled for lookup.
#[derive(Clone, Debug, Default)]
pub(crate) struct CostModel {
    by_name: HashMap<String, (Cost, Option<bool>)>,
    /// Base duration of executed kernels without a configured cost, ns.
    executed_base_ns: u64,
    /// Instructions per µs of executed kernels without a configured cost.
    executed_per_us: u64,
}

impl CostModel {
    /// Compiles a validated configuration.
    pub(crate) fn new(cfg: &SimConfig) -> CostModel {
        let by_name = cfg
            .kernels
            .iter()
            .map(|k| {
                let cost = match (k.duration_us, k.duration_param) {
                    _ if k.duration_hash => Cost::Hash,
                    _ if k.fault => Cost::Fault,
                    (Some(us), _) => Cost::Fixed((us * 1e3).round() as u64),
                    (None, p) => Cost::Param(p.unwrap_or(0)),
                };
                (k.name.clone(), (cost, k.execute))
            })
            .collect();
        CostModel {
            by_name,
            executed_base_ns: (cfg.executed_base_us * 1e3).round() as u64,
            executed_per_us: cfg.executed_instructions_per_us.max(1),
        }
    }

    /// The model of kernel `entry`: configured under its exact name, else
    /// under its demangled base name, else the built-in spin kernel, else
    /// nothing configured (executed, duration from its instructions).
    pub(crate) fn lookup(&self, entry: &str) -> KernelModel {
        let base = base_name(entry);
        let spin = entry == SPIN_KERNEL || base == Some(SPIN_KERNEL);
        match self
            .by_name
            .get(entry)
            .or_else(|| base.and_then(|b| self.by_name.get(b)))
        {
            Some(&(cost, execute)) => KernelModel {
                cost: Some(cost),
                execute: cost != Cost::Fault && execute.unwrap_or(!spin),
            },
            None if spin => KernelModel {
                cost: Some(Cost::Param(0)),
                execute: false,
            },
            None => KernelModel {
                cost: None,
                execute: true,
            },
        }
    }

    /// The modelled duration of an executed kernel without a configured
    /// cost that ran `instructions` (summed over threads): the base plus
    /// the instructions at the configured throughput, rounded up, at most
    /// [`MAX_KERNEL_NS`].
    pub(crate) fn executed_duration_ns(&self, instructions: u64) -> u64 {
        let per_us = u128::from(self.executed_per_us);
        let work = (u128::from(instructions) * 1000).div_ceil(per_us);
        let ns = u128::from(self.executed_base_ns) + work;
        u64::try_from(ns).unwrap_or(u64::MAX).min(MAX_KERNEL_NS)
    }
}

/// The base name of a simple Itanium-mangled name: `_Z4spinm` -> `spin`.
/// Nested, templated and other names have none.
pub(crate) fn base_name(mangled: &str) -> Option<&str> {
    let rest = mangled.strip_prefix("_Z")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || rest.starts_with('0') {
        return None;
    }
    let len: usize = rest[..digits].parse().ok()?;
    rest.get(digits..digits.checked_add(len)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_round_trip_and_defaults() {
        let cfg: SimConfig = toml::from_str(
            r#"
            memory_bytes = 1073741824
            kernels = [
              { name = "spin", duration_param = 0 },
              { name = "_Z6vecAddPKfS0_Pfi", duration_us = 12.5 },
            ]
            "#,
        )
        .expect("parses");
        assert_eq!(cfg.memory_bytes, 1 << 30);
        assert_eq!(cfg.name, "fairgpu SimGpu");
        assert_eq!(cfg.sm_count, 132);
        assert!(cfg.validate().is_ok());
        let again: SimConfig =
            serde_json::from_str(&serde_json::to_string(&cfg).expect("serialises"))
                .expect("parses");
        assert_eq!(again, cfg);
        assert!(toml::from_str::<SimConfig>("memory = 1").is_err());
        assert!(toml::from_str::<SimConfig>("kernels = [{ name = \"k\", duration = 1 }]").is_err());
    }

    #[test]
    fn validation_messages() {
        let with = |k: KernelCost| SimConfig {
            kernels: vec![k],
            ..SimConfig::default()
        };
        let k = |us, p| KernelCost {
            name: "k".into(),
            duration_us: us,
            duration_param: p,
            duration_hash: false,
            fault: false,
            execute: None,
        };
        assert!(with(k(Some(1.0), Some(0)))
            .validate()
            .is_err_and(|e| e.contains("set only one of")));
        assert!(with(k(None, None))
            .validate()
            .is_err_and(|e| e.contains("set duration_us")));
        assert!(with(k(Some(-1.0), None)).validate().is_err());
        assert!(with(k(Some(f64::NAN), None)).validate().is_err());
        assert!(with(k(None, Some(MAX_PARAMS))).validate().is_err());
        let mut twice = with(k(Some(1.0), None));
        twice.kernels.push(k(None, Some(1)));
        assert!(twice.validate().is_err_and(|e| e.contains("twice")));
        assert!(SimConfig {
            memory_bytes: 0,
            ..SimConfig::default()
        }
        .validate()
        .is_err());
        assert!(SimConfig::default().validate().is_ok());
    }

    #[test]
    fn names_and_lookup() {
        assert_eq!(base_name("_Z4spinm"), Some("spin"));
        assert_eq!(base_name("_Z12fairgpu_spinm"), Some("fairgpu_spin"));
        assert_eq!(base_name("_Z99x"), None);
        assert_eq!(base_name("_ZN3foo3barEv"), None);
        assert_eq!(base_name("_Z04spin"), None);
        assert_eq!(base_name("spin"), None);
        let m = CostModel::new(&SimConfig {
            kernels: vec![
                KernelCost {
                    name: "spin".into(),
                    duration_us: None,
                    duration_param: Some(1),
                    duration_hash: false,
                    fault: false,
                    execute: None,
                },
                KernelCost {
                    name: "_Z3fixv".into(),
                    duration_us: Some(2.5),
                    duration_param: None,
                    duration_hash: false,
                    fault: false,
                    execute: Some(false),
                },
                KernelCost {
                    name: "fairgpu_spin".into(),
                    duration_us: None,
                    duration_param: Some(0),
                    duration_hash: false,
                    fault: false,
                    execute: None,
                },
                KernelCost {
                    name: "bad".into(),
                    duration_us: None,
                    duration_param: None,
                    duration_hash: false,
                    fault: true,
                    execute: None,
                },
            ],
            ..SimConfig::default()
        });
        let model = |cost, execute| KernelModel { cost, execute };
        assert_eq!(m.lookup("_Z4spinmm"), model(Some(Cost::Param(1)), true));
        assert_eq!(m.lookup("spin"), model(Some(Cost::Param(1)), true));
        assert_eq!(m.lookup("_Z3fixv"), model(Some(Cost::Fixed(2500)), false));
        assert_eq!(m.lookup("fix"), model(None, true));
        assert_eq!(m.lookup("other"), model(None, true));
        assert_eq!(m.lookup("bad"), model(Some(Cost::Fault), false));
        // The spin kernel is timing-only, built in or configured.
        assert_eq!(m.lookup("fairgpu_spin"), model(Some(Cost::Param(0)), false));
        let built_in = CostModel::new(&SimConfig::default());
        assert_eq!(
            built_in.lookup("_Z12fairgpu_spinm"),
            model(Some(Cost::Param(0)), false)
        );
        assert_eq!(built_in.lookup("_Z4spinm"), model(None, true));
    }

    #[test]
    fn executed_kernels_cost_their_instructions() {
        let cfg = SimConfig {
            executed_base_us: 1.5,
            executed_instructions_per_us: 1000,
            ..SimConfig::default()
        };
        let m = CostModel::new(&cfg);
        assert_eq!(m.executed_duration_ns(0), 1500);
        assert_eq!(m.executed_duration_ns(1), 1501, "rounded up");
        assert_eq!(m.executed_duration_ns(1000), 2500);
        assert_eq!(m.executed_duration_ns(u64::MAX), MAX_KERNEL_NS);
        let d = CostModel::new(&SimConfig::default());
        // 10^13 instructions per second: 1 ns per 10,000.
        assert_eq!(d.executed_duration_ns(10_000_000), 2000 + 1000);
        assert_eq!(d.executed_duration_ns(10_001), 2000 + 2);
    }

    #[test]
    fn execution_settings_are_validated() {
        let bad = |f: fn(&mut SimConfig)| {
            let mut c = SimConfig::default();
            f(&mut c);
            c.validate().expect_err("invalid")
        };
        assert!(bad(|c| c.max_instructions = 0).contains("max_instructions"));
        assert!(bad(|c| c.max_instructions = MAX_MAX_INSTRUCTIONS + 1).contains("max_instructions"));
        assert!(bad(|c| c.executed_base_us = -1.0).contains("executed_base_us"));
        assert!(bad(|c| c.executed_base_us = f64::NAN).contains("executed_base_us"));
        assert!(bad(|c| c.executed_instructions_per_us = 0).contains("per_us"));
        let cfg: SimConfig = toml::from_str(
            "max_instructions = 5000\nexecuted_base_us = 0.5\n\
             kernels = [{ name = \"spin\", duration_param = 0, execute = false }]",
        )
        .expect("parses");
        assert!(cfg.validate().is_ok());
        assert_eq!(cfg.max_instructions, 5000);
        assert_eq!(cfg.kernels[0].execute, Some(false));
        let faulting: SimConfig =
            toml::from_str("kernels = [{ name = \"f\", fault = true, execute = true }]")
                .expect("parses");
        assert!(faulting
            .validate()
            .is_err_and(|e| e.contains("never executes")));
    }

    #[test]
    fn durations_from_every_parameter_byte() {
        let layout = [
            ParamInfo { offset: 0, size: 8 },
            ParamInfo { offset: 8, size: 4 },
        ];
        let mut params = [7u8; 12];
        let ns = Cost::Hash.duration_ns(&layout, &params).unwrap();
        assert_eq!(ns, HASH_BASE_NS + fnv1a64(&params) % HASH_SPAN_NS);
        assert!((HASH_BASE_NS..HASH_BASE_NS + HASH_SPAN_NS).contains(&ns));
        params[11] = 8;
        assert_ne!(
            Cost::Hash.duration_ns(&layout, &params).unwrap(),
            ns,
            "one byte changes it"
        );
        assert!(Cost::Hash.duration_ns(&layout, &params[..11]).is_err());
        // FNV-1a 64 reference values.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn durations_from_parameters() {
        let layout = [
            ParamInfo { offset: 0, size: 4 },
            ParamInfo { offset: 8, size: 8 },
        ];
        let mut p = [0u8; 16];
        p[0..4].copy_from_slice(&7u32.to_le_bytes());
        p[8..16].copy_from_slice(&9_000u64.to_le_bytes());
        assert_eq!(Cost::Param(0).duration_ns(&layout, &p), Ok(7));
        assert_eq!(Cost::Param(1).duration_ns(&layout, &p), Ok(9_000));
        assert!(Cost::Param(2).duration_ns(&layout, &p).is_err());
        assert!(Cost::Param(1).duration_ns(&layout, &p[..12]).is_err());
        p[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Cost::Param(1).duration_ns(&layout, &p).is_err());
        assert_eq!(Cost::Fixed(5).duration_ns(&[], &[]), Ok(5));
    }
}
