//! MD2, the message digest of RFC 1319, written from the RFC's description.
//!
//! NVIDIA's libcudart checks the driver it loaded with an HMAC built on MD2
//! (see [`crate::integrity`]), so the guest library needs MD2 and nothing
//! else does. MD2 is long broken as a cryptographic hash; here it is only an
//! interface: the answer must be the bytes cudart computes itself.
//!
//! The algorithm, by RFC 1319 section 3 (with the published erratum that the
//! checksum step XORs into `C[j]` rather than assigning it):
//!
//! 1. pad the message with `i` bytes of value `i` (1 ≤ i ≤ 16) to a multiple
//!    of 16 bytes;
//! 2. append a 16-byte checksum: for each block, for `j` in 0..16,
//!    `C[j] ^= S[M[j] ^ L]; L = C[j]`, with `L` carried across blocks;
//! 3. a 48-byte buffer `X` starts at zero;
//! 4. for each 16-byte block: `X[16..32] = M`, `X[32..48] = M ^ X[0..16]`,
//!    then 18 rounds of `for k in 0..48 { X[k] ^= S[t]; t = X[k] }` followed
//!    by `t = (t + round) mod 256`, with `t` starting at 0;
//! 5. the digest is `X[0..16]`.
//!
//! `S` is the RFC's 256-byte permutation "constructed from the digits of
//! pi". The construction (a Durstenfeld shuffle drawing its random numbers
//! from the decimal digits of pi, as Rivest described it publicly) is
//! reproduced by a test below that derives the table from pi and compares.
//!
//! Verified: the seven test vectors of RFC 1319 appendix A.5, and the
//! derivation of `S` from pi.

/// Length of an MD2 digest in bytes.
pub const DIGEST_LEN: usize = 16;

/// Length of an MD2 block in bytes (also HMAC's `B` for MD2).
pub const BLOCK_LEN: usize = 16;

/// RFC 1319's permutation of 0..=255 built from the digits of pi (the
/// RFC lists it in decimal, as here).
const PI_SUBST: [u8; 256] = [
    41, 46, 67, 201, 162, 216, 124, 1, 61, 54, 84, 161, 236, 240, 6, 19, //
    98, 167, 5, 243, 192, 199, 115, 140, 152, 147, 43, 217, 188, 76, 130, 202, //
    30, 155, 87, 60, 253, 212, 224, 22, 103, 66, 111, 24, 138, 23, 229, 18, //
    190, 78, 196, 214, 218, 158, 222, 73, 160, 251, 245, 142, 187, 47, 238, 122, //
    169, 104, 121, 145, 21, 178, 7, 63, 148, 194, 16, 137, 11, 34, 95, 33, //
    128, 127, 93, 154, 90, 144, 50, 39, 53, 62, 204, 231, 191, 247, 151, 3, //
    255, 25, 48, 179, 72, 165, 181, 209, 215, 94, 146, 42, 172, 86, 170, 198, //
    79, 184, 56, 210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4, 241, //
    69, 157, 112, 89, 100, 113, 135, 32, 134, 91, 207, 101, 230, 45, 168, 2, //
    27, 96, 37, 173, 174, 176, 185, 246, 28, 70, 97, 105, 52, 64, 126, 15, //
    85, 71, 163, 35, 221, 81, 175, 58, 195, 92, 249, 206, 186, 197, 234, 38, //
    44, 83, 13, 110, 133, 40, 132, 9, 211, 223, 205, 244, 65, 129, 77, 82, //
    106, 220, 55, 200, 108, 193, 171, 250, 36, 225, 123, 8, 12, 189, 177, 74, //
    120, 136, 149, 139, 227, 99, 232, 109, 233, 203, 213, 254, 59, 0, 29, 57, //
    242, 239, 183, 14, 102, 88, 208, 228, 166, 119, 114, 248, 235, 117, 75, 10, //
    49, 68, 80, 180, 143, 237, 31, 26, 219, 153, 141, 51, 159, 17, 131, 20, //
];

/// Number of mixing rounds per block (RFC 1319 step 4).
const ROUNDS: u8 = 18;

/// Incremental MD2: feed bytes with [`Md2::update`], then take the digest
/// with [`Md2::finish`].
#[derive(Clone, Debug)]
pub struct Md2 {
    /// `X` of RFC 1319: the running digest in its first 16 bytes.
    state: [u8; 3 * BLOCK_LEN],
    /// `C` of RFC 1319: the running checksum.
    checksum: [u8; BLOCK_LEN],
    /// `L` of RFC 1319: the last checksum byte written, carried across blocks.
    last_checksum_byte: u8,
    /// Bytes of the current, not yet complete block.
    pending: [u8; BLOCK_LEN],
    /// How many bytes of `pending` are filled (always < 16 between calls).
    pending_len: usize,
}

impl Default for Md2 {
    fn default() -> Self {
        Self::new()
    }
}

impl Md2 {
    /// A fresh digest (RFC 1319 step 3: all state zero).
    pub const fn new() -> Self {
        Md2 {
            state: [0; 3 * BLOCK_LEN],
            checksum: [0; BLOCK_LEN],
            last_checksum_byte: 0,
            pending: [0; BLOCK_LEN],
            pending_len: 0,
        }
    }

    /// Feeds `data` into the digest.
    pub fn update(&mut self, data: &[u8]) {
        for &byte in data {
            self.pending[self.pending_len] = byte;
            self.pending_len += 1;
            if self.pending_len == BLOCK_LEN {
                let block = self.pending;
                self.absorb_block(&block);
                self.pending_len = 0;
            }
        }
    }

    /// Pads, appends the checksum and returns the digest (RFC 1319 steps 1,
    /// 2 and 5).
    pub fn finish(mut self) -> [u8; DIGEST_LEN] {
        // 1 ≤ pad ≤ 16 because pending_len < 16.
        let pad = (BLOCK_LEN - self.pending_len) as u8;
        self.update(&[pad; BLOCK_LEN][..usize::from(pad)]);
        debug_assert_eq!(self.pending_len, 0);
        // The checksum block goes through the same block function; that it
        // also updates the checksum does not matter, nothing reads it after.
        let checksum = self.checksum;
        self.absorb_block(&checksum);
        let mut digest = [0; DIGEST_LEN];
        digest.copy_from_slice(&self.state[..DIGEST_LEN]);
        digest
    }

    /// Updates the checksum with one block and mixes the block into `X`.
    fn absorb_block(&mut self, block: &[u8; BLOCK_LEN]) {
        // Step 2, one block of the checksum.
        for (c, &m) in self.checksum.iter_mut().zip(block) {
            *c ^= PI_SUBST[usize::from(m ^ self.last_checksum_byte)];
            self.last_checksum_byte = *c;
        }
        // Step 4.
        let (digest, rest) = self.state.split_at_mut(BLOCK_LEN);
        let (copy, mixed) = rest.split_at_mut(BLOCK_LEN);
        for (((&m, x), c), d) in block.iter().zip(digest.iter()).zip(copy).zip(mixed) {
            *c = m;
            *d = m ^ x;
        }
        let mut t = 0u8;
        for round in 0..ROUNDS {
            for x in self.state.iter_mut() {
                *x ^= PI_SUBST[usize::from(t)];
                t = *x;
            }
            t = t.wrapping_add(round);
        }
    }
}

/// MD2 of `data` in one call.
pub fn digest(data: &[u8]) -> [u8; DIGEST_LEN] {
    let mut md = Md2::new();
    md.update(data);
    md.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// RFC 1319 appendix A.5, all seven vectors.
    #[test]
    fn rfc1319_test_suite() {
        let vectors: [(&[u8], &str); 7] = [
            (b"", "8350e5a3e24c153df2275c9f80692773"),
            (b"a", "32ec01ec4a6dac72c0ab96fb34c0b5d1"),
            (b"abc", "da853b0d3f88d99b30283a69e6ded6bb"),
            (b"message digest", "ab4f496bfb2a530b219ff33031fe06b0"),
            (
                b"abcdefghijklmnopqrstuvwxyz",
                "4e8ddff3650292ab5a4108c3aa47940b",
            ),
            (
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                "da33def2a42df13975352846c30338cd",
            ),
            (
                b"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "d5976f79d83d3a0dc9806c3c66f3efd8",
            ),
        ];
        for (message, expected) in vectors {
            assert_eq!(hex(&digest(message)), expected, "MD2({message:?})");
        }
    }

    /// Feeding the same bytes in pieces of any size gives the same digest.
    #[test]
    fn incremental_matches_one_shot() {
        let message: Vec<u8> = (0..200u8).collect();
        let whole = digest(&message);
        for piece in [1, 3, 15, 16, 17, 64] {
            let mut md = Md2::new();
            for chunk in message.chunks(piece) {
                md.update(chunk);
            }
            assert_eq!(md.finish(), whole, "pieces of {piece}");
        }
    }

    /// Decimal digits of pi, `count` of them starting with the 3, by the
    /// Rabinowitz–Wagon spigot.
    fn pi_decimal_digits(count: usize) -> Vec<u8> {
        let len = count * 10 / 3 + 1;
        let mut a = vec![2u64; len];
        let mut digits = Vec::with_capacity(count + 1);
        let mut predigit: Option<u8> = None;
        let mut nines = 0usize;
        while digits.len() < count {
            let mut q = 0u64;
            for i in (1..=len).rev() {
                let x = 10 * a[i - 1] + q * i as u64;
                let denominator = 2 * i as u64 - 1;
                a[i - 1] = x % denominator;
                q = x / denominator;
            }
            a[0] = q % 10;
            q /= 10;
            match q {
                9 => nines += 1,
                10 => {
                    digits.push(predigit.map_or(1, |p| p + 1));
                    digits.extend(std::iter::repeat_n(0, nines));
                    predigit = Some(0);
                    nines = 0;
                }
                _ => {
                    digits.extend(predigit);
                    digits.extend(std::iter::repeat_n(9, nines));
                    predigit = Some(q as u8);
                    nines = 0;
                }
            }
        }
        digits.truncate(count);
        digits
    }

    /// The S table is the Durstenfeld shuffle of 0..=255 driven by the
    /// digits of pi, drawing one, two or three digits per number and
    /// rejecting values that would bias the modulo.
    #[test]
    fn pi_subst_is_derived_from_pi() {
        let digits = pi_decimal_digits(800);
        let mut next = digits.iter().map(|&d| u32::from(d));
        let mut random_below = |n: u32| -> u32 {
            loop {
                let mut x = next.next().expect("enough digits of pi");
                let mut y = 10;
                if n > 10 {
                    x = x * 10 + next.next().expect("enough digits of pi");
                    y = 100;
                }
                if n > 100 {
                    x = x * 10 + next.next().expect("enough digits of pi");
                    y = 1000;
                }
                if x < n * (y / n) {
                    return x % n;
                }
            }
        };
        let mut table: Vec<u8> = (0..=255).collect();
        for i in 2..=256u32 {
            let j = random_below(i) as usize;
            table.swap(j, i as usize - 1);
        }
        assert_eq!(table, PI_SUBST);
        assert_eq!(&digits[..6], &[3, 1, 4, 1, 5, 9]);
    }
}
