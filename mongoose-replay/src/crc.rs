//! CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), the frame checksum of the store.

/// A running CRC-32 (crc32fast: table-driven, SIMD where the CPU has it).
#[derive(Clone, Debug, Default)]
pub(crate) struct Crc32(crc32fast::Hasher);

impl PartialEq for Crc32 {
    fn eq(&self, other: &Self) -> bool {
        self.finish() == other.finish()
    }
}

impl Eq for Crc32 {}

impl Crc32 {
    pub(crate) fn new() -> Self {
        Crc32(crc32fast::Hasher::new())
    }

    pub(crate) fn update(mut self, bytes: &[u8]) -> Self {
        self.add(bytes);
        self
    }

    /// Folds `bytes` into the running checksum in place.
    pub(crate) fn add(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The checksum of what was given so far (the running state is kept).
    pub(crate) fn finish(&self) -> u32 {
        self.0.clone().finalize()
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

    /// The byte-at-a-time CRC-32, the definition the store's checksum must equal.
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
    fn the_checksum_equals_the_bytewise_definition_at_every_length_and_split() {
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
