//! Small helpers over bytes: a readable size and the checksum the store and checkpoints use.

/// Bytes in a readable form: "1.5 GiB (1610612736 bytes)".
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} bytes");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {} ({n} bytes)", UNITS[unit])
}

/// FNV-1a, 64 bits, as 16 hex digits.
pub fn fnv1a64(bytes: &[u8]) -> String {
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3));
    format!("{h:016x}")
}

/// Whether `bytes` are the `len` bytes whose [`fnv1a64`] is `fnv`: the check every stored
/// chunk, file and checkpoint gets when it is read back (each caller names what failed).
pub fn matches(bytes: &[u8], len: usize, fnv: &str) -> bool {
    bytes.len() == len && fnv1a64(bytes) == fnv
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::test;

    #[test]
    fn fnv1a64_vectors() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a64(b""), "cbf29ce484222325");
        assert_eq!(fnv1a64(b"a"), "af63dc4c8601ec8c");
        assert_eq!(fnv1a64(b"foobar"), "85944171f73967e8");
    }

    #[test]
    fn matches_checks_the_size_and_the_sum() {
        assert!(matches(b"foobar", 6, "85944171f73967e8"));
        assert!(!matches(b"foobar", 5, "85944171f73967e8"));
        assert!(!matches(b"foobaz", 6, "85944171f73967e8"));
    }

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(1000), "1000 bytes");
        assert_eq!(human_bytes(1536), "1.5 KiB (1536 bytes)");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB (3221225472 bytes)");
    }
}
