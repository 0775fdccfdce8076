//! CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), the frame checksum of the store.

/// The slicing-by-8 tables: `TABLES[0]` is the classic byte table; `TABLES[k][b]` is
/// the CRC of byte `b` followed by `k` zero bytes, so eight bytes are folded in with
/// eight independent lookups.
const TABLES: [[u32; 256]; 8] = make_tables();

const fn make_tables() -> [[u32; 256]; 8] {
    let mut tables = [[0u32; 256]; 8];
    let mut index = 0;
    while index < 256 {
        let mut value = index as u32;
        let mut bit = 0;
        while bit < 8 {
            value = if value & 1 != 0 {
                0xEDB8_8320 ^ (value >> 1)
            } else {
                value >> 1
            };
            bit += 1;
        }
        tables[0][index] = value;
        index += 1;
    }
    let mut slice = 1;
    while slice < 8 {
        let mut index = 0;
        while index < 256 {
            let previous = tables[slice - 1][index];
            tables[slice][index] = (previous >> 8) ^ tables[0][(previous & 0xFF) as usize];
            index += 1;
        }
        slice += 1;
    }
    tables
}

/// A running CRC-32.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Crc32(u32);

impl Default for Crc32 {
    fn default() -> Self {
        Crc32::new()
    }
}

impl Crc32 {
    pub(crate) fn new() -> Self {
        Crc32(0xFFFF_FFFF)
    }

    pub(crate) fn update(mut self, bytes: &[u8]) -> Self {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let low = self.0 ^ u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            let high = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
            self.0 = TABLES[7][(low & 0xFF) as usize]
                ^ TABLES[6][((low >> 8) & 0xFF) as usize]
                ^ TABLES[5][((low >> 16) & 0xFF) as usize]
                ^ TABLES[4][(low >> 24) as usize]
                ^ TABLES[3][(high & 0xFF) as usize]
                ^ TABLES[2][((high >> 8) & 0xFF) as usize]
                ^ TABLES[1][((high >> 16) & 0xFF) as usize]
                ^ TABLES[0][(high >> 24) as usize];
        }
        for &byte in chunks.remainder() {
            self.0 = TABLES[0][((self.0 ^ byte as u32) & 0xFF) as usize] ^ (self.0 >> 8);
        }
        self
    }

    pub(crate) fn finish(self) -> u32 {
        !self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_matches_the_standard_check_value() {
        // the CRC-32/ISO-HDLC check value of "123456789"
        assert_eq!(Crc32::new().update(b"123456789").finish(), 0xCBF4_3926);
        assert_eq!(
            Crc32::new().update(b"1234").update(b"56789").finish(),
            0xCBF4_3926
        );
        assert_eq!(Crc32::new().finish(), 0);
    }

    /// The byte-at-a-time CRC-32, the definition the sliced one must equal.
    fn bytewise(bytes: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFFu32;
        for &byte in bytes {
            crc ^= byte as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    0xEDB8_8320 ^ (crc >> 1)
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn the_sliced_checksum_equals_the_bytewise_one_at_every_length_and_split() {
        let bytes: Vec<u8> = (0..300u32)
            .map(|n| (n.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for length in 0..bytes.len() {
            let whole = &bytes[..length];
            assert_eq!(
                Crc32::new().update(whole).finish(),
                bytewise(whole),
                "{length}"
            );
            let split = length / 3;
            assert_eq!(
                Crc32::new()
                    .update(&whole[..split])
                    .update(&whole[split..])
                    .finish(),
                bytewise(whole),
                "{length} split at {split}"
            );
        }
    }
}
