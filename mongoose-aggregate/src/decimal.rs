//! Fixed-point decimals (no floats for money) and the typed values of fields and
//! aggregates.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The most digits after the point a decimal keeps.
pub const MAX_SCALE: u8 = 18;

const POW10: [i128; 19] = {
    let mut table = [1i128; 19];
    let mut at = 1;
    while at < 19 {
        table[at] = table[at - 1] * 10;
        at += 1;
    }
    table
};

/// A fixed-point decimal: `units / 10^scale`, exact. Two decimals are equal when
/// their values are (`1.5 == 1.50`); a sum keeps the larger scale.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Decimal {
    units: i128,
    scale: u8,
}

impl Decimal {
    /// The integer `value`.
    pub const fn from_integer(value: i64) -> Self {
        Decimal {
            units: value as i128,
            scale: 0,
        }
    }

    /// `units / 10^scale` (`scale` at most [`MAX_SCALE`]).
    pub fn new(units: i128, scale: u8) -> Option<Self> {
        (scale <= MAX_SCALE).then_some(Decimal { units, scale })
    }

    /// Parses `-12.345`, `+3`, `0.5`, `.5` (no exponent, at most 18 decimals).
    pub fn parse(text: &str) -> Option<Self> {
        let (negative, digits) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.len() > usize::from(MAX_SCALE) {
            return None;
        }
        let mut units: i128 = 0;
        for byte in whole.bytes().chain(fraction.bytes()) {
            if !byte.is_ascii_digit() {
                return None;
            }
            units = units
                .checked_mul(10)?
                .checked_add(i128::from(byte - b'0'))?;
        }
        Some(Decimal {
            units: if negative { -units } else { units },
            scale: fraction.len() as u8,
        })
    }

    /// The integer part (toward negative infinity) and the fraction scaled to 18
    /// digits: what comparing needs without overflow.
    fn parts(self) -> (i128, i128) {
        let one = POW10[usize::from(self.scale)];
        let whole = self.units.div_euclid(one);
        let fraction = self.units.rem_euclid(one) * POW10[usize::from(MAX_SCALE - self.scale)];
        (whole, fraction)
    }

    fn rescaled(self, scale: u8) -> Option<i128> {
        self.units
            .checked_mul(POW10[usize::from(scale - self.scale)])
    }

    /// `self + other`, `None` when it overflows.
    pub fn checked_add(self, other: Decimal) -> Option<Decimal> {
        if self.scale == other.scale {
            return Some(Decimal {
                units: self.units.checked_add(other.units)?,
                scale: self.scale,
            });
        }
        let scale = self.scale.max(other.scale);
        Some(Decimal {
            units: self.rescaled(scale)?.checked_add(other.rescaled(scale)?)?,
            scale,
        })
    }

    /// The value's units (`value * 10^scale`).
    pub fn units(self) -> i128 {
        self.units
    }

    /// The digits after the point.
    pub fn scale(self) -> u8 {
        self.scale
    }

    /// True when the value is below zero.
    pub fn is_negative(self) -> bool {
        self.units < 0
    }

    /// The value as an `i64` when it is a whole number that fits.
    pub fn to_i64(self) -> Option<i64> {
        let one = POW10[usize::from(self.scale)];
        (self.units % one == 0)
            .then(|| i64::try_from(self.units / one).ok())
            .flatten()
    }
}

impl PartialEq for Decimal {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Decimal {}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        if self.scale == other.scale {
            return self.units.cmp(&other.units);
        }
        self.parts().cmp(&other.parts())
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.scale == 0 {
            return write!(f, "{}", self.units);
        }
        let one = POW10[usize::from(self.scale)];
        let sign = if self.units < 0 { "-" } else { "" };
        let magnitude = self.units.unsigned_abs();
        let one = one as u128;
        write!(
            f,
            "{sign}{}.{:0width$}",
            magnitude / one,
            magnitude % one,
            width = usize::from(self.scale)
        )
    }
}

/// A typed value: a field of a line, or an aggregate's result.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Value {
    /// An integer or a decimal.
    Number(Decimal),
    /// A string.
    Text(String),
    /// A timestamp, in milliseconds since the Unix epoch (UTC).
    Time(i64),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Number(number) => number.fmt(f),
            Value::Text(text) => f.write_str(text),
            Value::Time(millis) => f.write_str(&format_time(*millis)),
        }
    }
}

impl Value {
    /// The value as JSON: a number as a string when it has decimals (exact), a time as
    /// RFC 3339.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Number(number) => match number.to_i64() {
                Some(integer) => integer.into(),
                None => number.to_string().into(),
            },
            Value::Text(text) => text.clone().into(),
            Value::Time(millis) => format_time(*millis).into(),
        }
    }
}

/// `millis` since the epoch as RFC 3339 in UTC, with milliseconds.
pub fn format_time(millis: i64) -> String {
    match chrono::DateTime::from_timestamp_millis(millis) {
        Some(time) => time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        None => millis.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_parse_add_compare_and_print_exactly() {
        let a = Decimal::parse("1.5").unwrap();
        let b = Decimal::parse("-2.25").unwrap();
        assert_eq!(a.checked_add(b).unwrap().to_string(), "-0.75");
        assert_eq!(a, Decimal::parse("1.50").unwrap());
        assert!(b < a && Decimal::parse("-0.5").unwrap() > b);
        assert_eq!(
            Decimal::parse("0.1")
                .unwrap()
                .checked_add(Decimal::parse("0.2").unwrap()),
            Decimal::parse("0.3")
        );
        for bad in ["", "-", ".", "1e5", "1.2.3", "x", "1,5"] {
            assert_eq!(Decimal::parse(bad), None, "{bad}");
        }
        assert_eq!(Decimal::parse(".5").unwrap().to_string(), "0.5");
        assert_eq!(Decimal::from_integer(-7).to_string(), "-7");
        assert_eq!(Decimal::parse("-0.05").unwrap().to_string(), "-0.05");
    }
}
