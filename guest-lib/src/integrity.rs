//! The answer to libcudart's driver integrity check.
//!
//! # What libcudart needs
//!
//! After loading `libcuda.so.1`, NVIDIA's libcudart fetches the export table
//! `d4082055-bde6-704b-8d34-ba123c66e1f2` (INTEGRITY_CHECK) and calls its
//! slot 1, `CUresult (unsigned version, uint64_t unix_secs, uint64_t out[2])`,
//! three times with versions `v`, `v + 1` and `v + 2`. It computes the same
//! answer itself and refuses the driver when they differ. Because the answer
//! hashes values local to the guest process (its pid, the calling thread,
//! the addresses of our own tables), it is computed here and never forwarded
//! to the host.
//!
//! # The algorithm (facts, as documented by public reverse-engineering notes
//! of the CUDA "dark API", the ZLUDA project's among them)
//!
//! * When the last decimal digit of `version` is 0 or 1, the answer is a
//!   fixed pair of words that does not depend on any input
//!   ([`fixed_answer`]).
//! * Otherwise the answer is HMAC (RFC 2104) over MD2 (RFC 1319), whose
//!   block size is 16 bytes, keyed by a fixed 16-byte key, over this message,
//!   laid out in the process's native byte order (little-endian on every
//!   target we build) exactly as a C struct on a 64-bit target:
//!
//!   | offset | size | field |
//!   |---|---|---|
//!   | 0 | 4 | driver version, as `cuDriverGetVersion` reports it |
//!   | 4 | 4 | `version`, the argument |
//!   | 8 | 4 | process id (`getpid`) |
//!   | 12 | 4 | calling thread: `pthread_self()` truncated to 32 bits |
//!   | 16 | 8 | address of the CUDART_INTERFACE table (as `cuGetExportTable` returned it) |
//!   | 24 | 8 | address of the INTEGRITY_CHECK table |
//!   | 32 | 8 | address of the function in INTEGRITY_CHECK slot 1 |
//!   | 40 | 8 | `unix_secs`, the argument |
//!
//!   followed, for each device ordinal `0..cuDeviceGetCount`, by 28 bytes:
//!   the 16-byte `cuDeviceGetUuid` value, then the `i32` attributes
//!   `CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID`, `..._PCI_BUS_ID` and
//!   `..._PCI_DEVICE_ID`.
//! * The 16 digest bytes are written to `out` as they lie in memory
//!   (`out[0]` holds bytes 0..8 in native order).
//!
//! libcudart computes the same hash from what it sees: the table pointers
//! `cuGetExportTable` gave it, the slot 1 pointer it read from that table, the
//! version `cuDriverGetVersion` reported, and the UUIDs and PCI attributes
//! the device queries reported. Every one of those must therefore come from
//! the same source as the exported entry points (see
//! [`crate::export_tables::DriverHooks`]).
//!
//! The key and the two fixed answers are interface constants: they are the
//! values NVIDIA's runtime expects and can only be taken from the
//! documentation of that interface. The public notes describe the key as the
//! result of a first pass that uses no input.
//!
//! # What is verified
//!
//! * MD2 against all seven RFC 1319 test vectors and its table against its
//!   derivation from pi ([`crate::md2`]).
//! * The HMAC construction against vectors computed by an independent
//!   implementation of RFC 2104 + RFC 1319, and (for a key of one block)
//!   against the definition written out by hand in the test.
//! * The message layout against the table above.
//! * Agreement with NVIDIA's libcudart, once, outside the test suite: these
//!   modules behind a throwaway stand-in driver (a dozen entry points
//!   answering for one fake device) let libcudart 12.9.79, 13.0.88 and
//!   13.5.37, each linked both statically and shared, pass the check and run
//!   `cudaGetDeviceCount`, `cudaFree(0)`, `cudaGetDeviceProperties` and
//!   `cudaMalloc`; flipping one bit of one hashed input (a device UUID) made
//!   every one of those calls fail with `cudaErrorSoftwareValidityNotEstablished`
//!   (103). The whole guest library is to be run against the same runtimes.

use crate::md2::{self, Md2};

/// HMAC-MD2 key of the check (interface constant, see the module docs).
const CHECK_KEY: [u8; md2::BLOCK_LEN] = [
    0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52, 0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f,
];

/// Answer for versions whose last decimal digit is 0 (interface constant).
const ANSWER_LAST_DIGIT_0: [u64; 2] = [0x3341_181c_03cb_675c, 0x8ed3_83aa_1f4c_d1e8];

/// Answer for versions whose last decimal digit is 1 (interface constant).
const ANSWER_LAST_DIGIT_1: [u64; 2] = [0x1841_181c_03cb_675c, 0x8ed3_83aa_1f4c_d1e8];

/// RFC 2104 inner pad byte.
const IPAD: u8 = 0x36;

/// RFC 2104 outer pad byte.
const OPAD: u8 = 0x5c;

/// Length of the fixed part of the hashed message.
pub const HEADER_LEN: usize = 48;

/// Length of one device's record in the hashed message.
pub const DEVICE_RECORD_LEN: usize = 28;

/// One device as the check sees it. All fields must equal what the exported
/// `cuDeviceGetUuid` and `cuDeviceGetAttribute` report for that ordinal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceIdentity {
    /// `cuDeviceGetUuid` bytes.
    pub uuid: [u8; 16],
    /// `CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID`.
    pub pci_domain: i32,
    /// `CU_DEVICE_ATTRIBUTE_PCI_BUS_ID`.
    pub pci_bus: i32,
    /// `CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID`.
    pub pci_device: i32,
}

impl DeviceIdentity {
    /// The device's 28-byte record in the hashed message.
    pub fn record(&self) -> [u8; DEVICE_RECORD_LEN] {
        let mut record = [0; DEVICE_RECORD_LEN];
        record[..16].copy_from_slice(&self.uuid);
        record[16..20].copy_from_slice(&self.pci_domain.to_ne_bytes());
        record[20..24].copy_from_slice(&self.pci_bus.to_ne_bytes());
        record[24..28].copy_from_slice(&self.pci_device.to_ne_bytes());
        record
    }
}

/// Everything the hashed answer depends on besides the two call arguments.
#[derive(Clone, Copy, Debug)]
pub struct CheckInputs<'a> {
    /// What `cuDriverGetVersion` reports.
    pub driver_version: u32,
    /// The process id.
    pub process_id: u32,
    /// The calling thread's `pthread_self()`, truncated to 32 bits.
    pub thread: u32,
    /// Address of the CUDART_INTERFACE table handed to cudart.
    pub cudart_table: usize,
    /// Address of the INTEGRITY_CHECK table handed to cudart.
    pub integrity_table: usize,
    /// Address stored in INTEGRITY_CHECK slot 1.
    pub check_function: usize,
    /// Every device, in ordinal order.
    pub devices: &'a [DeviceIdentity],
}

impl CheckInputs<'_> {
    /// The fixed 48-byte head of the hashed message.
    pub fn header(&self, version: u32, unix_secs: u64) -> [u8; HEADER_LEN] {
        let mut header = [0; HEADER_LEN];
        header[0..4].copy_from_slice(&self.driver_version.to_ne_bytes());
        header[4..8].copy_from_slice(&version.to_ne_bytes());
        header[8..12].copy_from_slice(&self.process_id.to_ne_bytes());
        header[12..16].copy_from_slice(&self.thread.to_ne_bytes());
        header[16..24].copy_from_slice(&(self.cudart_table as u64).to_ne_bytes());
        header[24..32].copy_from_slice(&(self.integrity_table as u64).to_ne_bytes());
        header[32..40].copy_from_slice(&(self.check_function as u64).to_ne_bytes());
        header[40..48].copy_from_slice(&unix_secs.to_ne_bytes());
        header
    }
}

/// The answer for versions that need no inputs: those whose last decimal
/// digit is 0 or 1. `None` for every other version.
pub fn fixed_answer(version: u32) -> Option<[u64; 2]> {
    match version % 10 {
        0 => Some(ANSWER_LAST_DIGIT_0),
        1 => Some(ANSWER_LAST_DIGIT_1),
        _ => None,
    }
}

/// The answer libcudart expects from INTEGRITY_CHECK slot 1 for `version`
/// called at `unix_secs`.
pub fn check_answer(version: u32, unix_secs: u64, inputs: &CheckInputs<'_>) -> [u64; 2] {
    if let Some(answer) = fixed_answer(version) {
        return answer;
    }
    let header = inputs.header(version, unix_secs);
    let mac = hmac_md2_with(&CHECK_KEY, |md| {
        md.update(&header);
        for device in inputs.devices {
            md.update(&device.record());
        }
    });
    digest_words(&mac)
}

/// The 16 digest bytes as two words in native order, as they lie in memory.
fn digest_words(digest: &[u8; md2::DIGEST_LEN]) -> [u64; 2] {
    let mut low = [0; 8];
    let mut high = [0; 8];
    low.copy_from_slice(&digest[..8]);
    high.copy_from_slice(&digest[8..]);
    [u64::from_ne_bytes(low), u64::from_ne_bytes(high)]
}

/// HMAC-MD2 (RFC 2104 with `H` = MD2, `B` = 16, `L` = 16) of whatever
/// `feed_message` feeds into the inner digest.
fn hmac_md2_with(key: &[u8], feed_message: impl FnOnce(&mut Md2)) -> [u8; md2::DIGEST_LEN] {
    // RFC 2104 step 1: keys longer than B are hashed first, shorter ones are
    // padded with zeros to B bytes.
    let mut block_key = [0u8; md2::BLOCK_LEN];
    if key.len() > md2::BLOCK_LEN {
        block_key = md2::digest(key);
    } else {
        block_key[..key.len()].copy_from_slice(key);
    }
    let mut inner = Md2::new();
    inner.update(&block_key.map(|b| b ^ IPAD));
    feed_message(&mut inner);
    let inner_digest = inner.finish();
    let mut outer = Md2::new();
    outer.update(&block_key.map(|b| b ^ OPAD));
    outer.update(&inner_digest);
    outer.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn hmac_md2(key: &[u8], message: &[u8]) -> [u8; md2::DIGEST_LEN] {
        hmac_md2_with(key, |md| md.update(message))
    }

    #[test]
    fn versions_ending_in_0_and_1_have_fixed_answers() {
        for version in [12000, 12060, 12090, 13000, 13050, 10] {
            assert_eq!(fixed_answer(version), Some(ANSWER_LAST_DIGIT_0));
            assert_eq!(fixed_answer(version + 1), Some(ANSWER_LAST_DIGIT_1));
            for other in 2..10 {
                assert_eq!(fixed_answer(version + other), None);
            }
        }
        // The fixed answers do not depend on the inputs.
        let inputs = sample_inputs(&[]);
        assert_eq!(check_answer(12060, 1, &inputs), ANSWER_LAST_DIGIT_0);
        assert_eq!(check_answer(12061, 2, &inputs), ANSWER_LAST_DIGIT_1);
    }

    /// For a key of exactly one block, HMAC is MD2((K^ipad) || m) fed into
    /// MD2((K^opad) || inner), written out here with no shared code path.
    #[test]
    fn hmac_matches_its_definition_for_a_block_key() {
        let key: [u8; 16] = core::array::from_fn(|i| i as u8 * 17);
        let message = b"the quick brown fox";
        let mut inner_input: Vec<u8> = key.iter().map(|b| b ^ 0x36).collect();
        inner_input.extend_from_slice(message);
        let inner = md2::digest(&inner_input);
        let mut outer_input: Vec<u8> = key.iter().map(|b| b ^ 0x5c).collect();
        outer_input.extend_from_slice(&inner);
        assert_eq!(hmac_md2(&key, message), md2::digest(&outer_input));
    }

    /// Vectors computed by a separate implementation of RFC 2104 over
    /// RFC 1319 (short key padded, one-block key, long key hashed).
    #[test]
    fn hmac_vectors() {
        assert_eq!(
            hex(&hmac_md2(
                b"key",
                b"The quick brown fox jumps over the lazy dog"
            )),
            "13758b9534bfb38d850457814613b0c1",
        );
        assert_eq!(
            hex(&hmac_md2(&[0x0b; 16], b"Hi There")),
            "b524be0196e491ed44823746cd8923af"
        );
        assert_eq!(
            hex(&hmac_md2(&[0xaa; 40], b"")),
            "6c09f892166a5c659f3f139b697fd1e2"
        );
    }

    fn sample_inputs(devices: &[DeviceIdentity]) -> CheckInputs<'_> {
        CheckInputs {
            driver_version: 12080,
            process_id: 0x0001_2345,
            thread: 0x89ab_cdef,
            cudart_table: 0x7f00_1234_5600,
            integrity_table: 0x7f00_1234_5680,
            check_function: 0x7f00_1200_0010,
            devices,
        }
    }

    const SAMPLE_DEVICE: DeviceIdentity = DeviceIdentity {
        uuid: [
            0x10, 0x21, 0x32, 0x43, 0x54, 0x65, 0x76, 0x87, 0x98, 0xa9, 0xba, 0xcb, 0xdc, 0xed,
            0xfe, 0x0f,
        ],
        pci_domain: 0,
        pci_bus: 0x41,
        pci_device: 0,
    };

    #[test]
    fn message_layout() {
        let devices = [SAMPLE_DEVICE];
        let inputs = sample_inputs(&devices);
        let header = inputs.header(12062, 0x6650_0000);
        assert_eq!(&header[0..4], &12080u32.to_ne_bytes());
        assert_eq!(&header[4..8], &12062u32.to_ne_bytes());
        assert_eq!(&header[8..12], &0x0001_2345u32.to_ne_bytes());
        assert_eq!(&header[12..16], &0x89ab_cdefu32.to_ne_bytes());
        assert_eq!(&header[16..24], &0x7f00_1234_5600u64.to_ne_bytes());
        assert_eq!(&header[24..32], &0x7f00_1234_5680u64.to_ne_bytes());
        assert_eq!(&header[32..40], &0x7f00_1200_0010u64.to_ne_bytes());
        assert_eq!(&header[40..48], &0x6650_0000u64.to_ne_bytes());
        let record = SAMPLE_DEVICE.record();
        assert_eq!(&record[..16], &SAMPLE_DEVICE.uuid);
        assert_eq!(&record[16..20], &0i32.to_ne_bytes());
        assert_eq!(&record[20..24], &0x41i32.to_ne_bytes());
        assert_eq!(&record[24..28], &0i32.to_ne_bytes());
    }

    /// The hashed answer equals HMAC-MD2 over header || records, and its
    /// value matches the separate implementation.
    #[test]
    fn hashed_answer() {
        let devices = [
            SAMPLE_DEVICE,
            DeviceIdentity {
                pci_bus: 0x42,
                ..SAMPLE_DEVICE
            },
        ];
        let inputs = sample_inputs(&devices);
        let mut message = inputs.header(12062, 0x6650_0000).to_vec();
        for device in &devices {
            message.extend_from_slice(&device.record());
        }
        let answer = check_answer(12062, 0x6650_0000, &inputs);
        assert_eq!(answer, digest_words(&hmac_md2(&CHECK_KEY, &message)));
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&answer[0].to_ne_bytes());
        bytes.extend_from_slice(&answer[1].to_ne_bytes());
        assert_eq!(hex(&bytes), "9fdb0a720f0ce236544792e3b70dbeaf");
        // Every input changes the answer.
        let base = check_answer(12062, 0x6650_0000, &inputs);
        assert_ne!(base, check_answer(12063, 0x6650_0000, &inputs));
        assert_ne!(base, check_answer(12062, 0x6650_0001, &inputs));
        assert_ne!(
            base,
            check_answer(12062, 0x6650_0000, &sample_inputs(&devices[..1]))
        );
        assert_ne!(
            base,
            check_answer(
                12062,
                0x6650_0000,
                &CheckInputs {
                    thread: 1,
                    ..inputs
                }
            )
        );
    }
}
