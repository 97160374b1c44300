//! Sizes of memory as people write them in `agensh.toml` (`"64GiB"`, `"512MiB"`,
//! `"1.5G"`) and as agensh says them back (`512 MiB`).
//!
//! Units are binary (powers of 1,024): `K`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB`, as the
//! kernel's cgroup files, systemd and container tools read `512M`; a bare number is bytes.
//! `KB`, `MB`, `GB`, `TB` are refused, not guessed: some tools read them as powers of 1,000,
//! others as powers of 1,024, and a memory limit 7 % off is a limit that surprises.

use std::fmt;

/// A number of bytes of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemorySize(u64);

const UNITS: [(&str, u32); 5] = [("", 0), ("K", 10), ("M", 20), ("G", 30), ("T", 40)];

impl MemorySize {
    /// `bytes` bytes.
    pub const fn bytes(bytes: u64) -> MemorySize {
        MemorySize(bytes)
    }

    /// `mib` mebibytes.
    pub const fn mib(mib: u64) -> MemorySize {
        MemorySize(mib << 20)
    }

    /// The number of bytes.
    pub const fn as_bytes(self) -> u64 {
        self.0
    }

    /// Reads `"64GiB"`, `"512 MiB"`, `"1.5G"`, `"1048576"`; the error says what is wrong
    /// and how to write it.
    pub fn parse(text: &str) -> Result<MemorySize, String> {
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (number, unit) = (t[..split].trim(), t[split..].trim());
        let how = "write a number with a binary unit, e.g. \"512MiB\", \"64GiB\" or \"1.5G\"";
        if number.is_empty() {
            return Err(format!("\"{text}\" is not a size — {how}"));
        }
        let shift = match unit.to_ascii_uppercase().as_str() {
            "" | "B" => 0,
            "K" | "KIB" => 10,
            "M" | "MIB" => 20,
            "G" | "GIB" => 30,
            "T" | "TIB" => 40,
            "KB" | "MB" | "GB" | "TB" => {
                let binary = format!("{}iB", &unit[..1].to_ascii_uppercase());
                return Err(format!(
                    "\"{text}\": {unit} is ambiguous (1,000 or 1,024?) — write {number}{binary}"
                ));
            }
            _ => return Err(format!("\"{text}\" has an unknown unit \"{unit}\" — {how}")),
        };
        let bytes = if let Some((whole, frac)) = number.split_once('.') {
            let whole: u64 = if whole.is_empty() {
                0
            } else {
                whole
                    .parse()
                    .map_err(|_| format!("\"{text}\" is not a size — {how}"))?
            };
            if frac.is_empty() || frac.contains('.') || frac.len() > 6 {
                return Err(format!("\"{text}\" is not a size — {how}"));
            }
            let digits: u64 = frac
                .parse()
                .map_err(|_| format!("\"{text}\" is not a size — {how}"))?;
            let scale = 10u128.pow(frac.len() as u32);
            let unit = 1u128 << shift;
            let total = u128::from(whole) * unit + u128::from(digits) * unit / scale;
            u64::try_from(total).map_err(|_| format!("\"{text}\" is too large"))?
        } else {
            let n: u64 = number
                .parse()
                .map_err(|_| format!("\"{text}\" is not a size — {how}"))?;
            n.checked_mul(1 << shift)
                .ok_or_else(|| format!("\"{text}\" is too large"))?
        };
        Ok(MemorySize(bytes))
    }
}

impl fmt::Display for MemorySize {
    /// In the largest binary unit it reaches, with one decimal when not whole:
    /// `512 MiB`, `64 GiB`, `1.5 GiB`, `1000 B`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, shift) = UNITS
            .iter()
            .rev()
            .find(|(_, s)| self.0 >= 1u64 << s)
            .copied()
            .unwrap_or(("", 0));
        if shift == 0 {
            return write!(f, "{} B", self.0);
        }
        let unit = 1u64 << shift;
        if self.0.is_multiple_of(unit) {
            write!(f, "{} {name}iB", self.0 / unit)
        } else {
            write!(f, "{:.1} {name}iB", self.0 as f64 / unit as f64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_units_and_bare_bytes_are_read() {
        let p = |t| MemorySize::parse(t).unwrap().as_bytes();
        assert_eq!(p("64GiB"), 64 << 30);
        assert_eq!(p("512MiB"), 512 << 20);
        assert_eq!(p("512 mib"), 512 << 20);
        assert_eq!(p("512M"), 512 << 20);
        assert_eq!(p("1.5G"), 3 << 29);
        assert_eq!(p("2T"), 2 << 40);
        assert_eq!(p("4096"), 4096);
        assert_eq!(p("4096B"), 4096);
        assert_eq!(p("8K"), 8192);
    }

    #[test]
    fn ambiguous_units_and_nonsense_are_refused_with_what_to_write() {
        let e = MemorySize::parse("64GB").unwrap_err();
        assert!(e.contains("ambiguous") && e.contains("64GiB"), "{e}");
        let e = MemorySize::parse("lots").unwrap_err();
        assert!(e.contains("512MiB"), "{e}");
        let e = MemorySize::parse("12 parsecs").unwrap_err();
        assert!(e.contains("unknown unit"), "{e}");
        assert!(MemorySize::parse("").is_err());
        assert!(MemorySize::parse("1.2.3G").is_err());
        assert!(MemorySize::parse("-5M").is_err());
        let e = MemorySize::parse("99999999T").unwrap_err();
        assert!(e.contains("too large"), "{e}");
    }

    #[test]
    fn sizes_are_said_in_the_largest_unit_they_reach() {
        assert_eq!(MemorySize::mib(512).to_string(), "512 MiB");
        assert_eq!(MemorySize::bytes(64 << 30).to_string(), "64 GiB");
        assert_eq!(MemorySize::bytes(3 << 29).to_string(), "1.5 GiB");
        assert_eq!(MemorySize::bytes(1000).to_string(), "1000 B");
    }
}
