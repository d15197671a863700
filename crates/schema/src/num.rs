//! Exact comparison of the numbers that meet in validation: schema numbers (`i64`, `u64`,
//! `f64`), guest integers (`i64`, or decimal text beyond it) and guest floats (finite `f64`).

use std::cmp::Ordering;
use std::fmt;

/// 2^127 as an `f64` (exact). Every `i128` lies in [-2^127, 2^127).
const TWO_127: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;

/// A number from the schema.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    I(i128),
    F(f64),
}

impl Num {
    pub(crate) fn of_json(n: &serde_json::Number) -> Option<Num> {
        if let Some(i) = n.as_i64() {
            Some(Num::I(i128::from(i)))
        } else if let Some(u) = n.as_u64() {
            Some(Num::I(i128::from(u)))
        } else {
            n.as_f64().filter(|f| f.is_finite()).map(Num::F)
        }
    }

    pub(crate) fn as_ref(self) -> NumRef<'static> {
        match self {
            Num::I(i) => NumRef::I(i),
            Num::F(f) => NumRef::F(f),
        }
    }

    pub(crate) fn is_positive(self) -> bool {
        match self {
            Num::I(i) => i > 0,
            Num::F(f) => f > 0.0,
        }
    }
}

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_ref().fmt(f)
    }
}

/// A number of either side. `Big` is an integer outside `i128`, as sign and decimal digits
/// without leading zeros.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum NumRef<'a> {
    I(i128),
    F(f64),
    Big { neg: bool, digits: &'a str },
}

impl<'a> NumRef<'a> {
    /// A guest integer given as decimal text; `None` if the text is not an integer.
    pub(crate) fn of_text(text: &'a str) -> Option<NumRef<'a>> {
        let (neg, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if let Ok(i) = text.parse::<i128>() {
            return Some(NumRef::I(i));
        }
        let digits = digits.trim_start_matches('0');
        Some(NumRef::Big { neg, digits })
    }

    /// The nearest `f64` (used only where exactness cannot matter, or as a last resort).
    fn approx(self) -> f64 {
        match self {
            NumRef::I(i) => i as f64,
            NumRef::F(f) => f,
            NumRef::Big { neg, digits } => {
                let m = digits.parse::<f64>().unwrap_or(f64::INFINITY);
                if neg { -m } else { m }
            }
        }
    }
}

impl fmt::Display for NumRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            NumRef::I(i) => write!(f, "{i}"),
            NumRef::F(x) => {
                let a = x.abs();
                if a != 0.0 && !(1e-5..1e16).contains(&a) {
                    write!(f, "{x:e}")
                } else {
                    write!(f, "{x}")
                }
            }
            NumRef::Big { neg, digits } => write!(f, "{}{digits}", if neg { "-" } else { "" }),
        }
    }
}

/// Exact numeric order.
pub(crate) fn cmp(a: NumRef<'_>, b: NumRef<'_>) -> Ordering {
    use NumRef::{Big, F, I};
    match (a, b) {
        (I(x), I(y)) => x.cmp(&y),
        (F(x), F(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        (I(x), F(y)) => cmp_int_float(x, y),
        (F(x), I(y)) => cmp_int_float(y, x).reverse(),
        // A `Big` lies outside `i128`, so its sign decides against any `i128`.
        (Big { neg, .. }, I(_)) => sign_order(neg),
        (I(_), Big { neg, .. }) => sign_order(neg).reverse(),
        (Big { neg, digits }, F(y)) => cmp_big_float(neg, digits, y),
        (F(x), Big { neg, digits }) => cmp_big_float(neg, digits, x).reverse(),
        (
            Big {
                neg: n1,
                digits: d1,
            },
            Big {
                neg: n2,
                digits: d2,
            },
        ) => cmp_big(n1, d1, n2, d2),
    }
}

/// Whether two numbers are mathematically equal (`1 == 1.0`).
pub(crate) fn eq(a: NumRef<'_>, b: NumRef<'_>) -> bool {
    cmp(a, b) == Ordering::Equal
}

fn sign_order(neg: bool) -> Ordering {
    if neg {
        Ordering::Less
    } else {
        Ordering::Greater
    }
}

fn cmp_int_float(i: i128, f: f64) -> Ordering {
    if f >= TWO_127 {
        Ordering::Less
    } else if f < -TWO_127 {
        Ordering::Greater
    } else {
        let t = f.trunc();
        // |t| <= 2^127 and t is whole, so the cast is exact (-2^127 is i128::MIN).
        match i.cmp(&(t as i128)) {
            Ordering::Equal => 0.0_f64.partial_cmp(&(f - t)).unwrap_or(Ordering::Equal),
            other => other,
        }
    }
}

fn cmp_big_float(neg: bool, digits: &str, f: f64) -> Ordering {
    if f.abs() < TWO_127 {
        return sign_order(neg);
    }
    // |f| >= 2^127 is a whole number; its exact decimal expansion compares digit by digit.
    let f_digits = format!("{:.0}", f.abs());
    cmp_big(neg, digits, f < 0.0, &f_digits)
}

fn cmp_big(n1: bool, d1: &str, n2: bool, d2: &str) -> Ordering {
    if n1 != n2 {
        return sign_order(n1);
    }
    let magnitude = d1.len().cmp(&d2.len()).then_with(|| d1.cmp(d2));
    if n1 { magnitude.reverse() } else { magnitude }
}

/// A hashable canonical form: two numbers are equal iff their canonical forms are.
#[derive(Debug, Hash, PartialEq, Eq)]
pub(crate) enum Canon<'a> {
    I(i128),
    F(u64),
    Big(bool, std::borrow::Cow<'a, str>),
}

pub(crate) fn canon(n: NumRef<'_>) -> Canon<'_> {
    match n {
        NumRef::I(i) => Canon::I(i),
        NumRef::F(f) if f.fract() == 0.0 => {
            if f.abs() < TWO_127 {
                Canon::I(f as i128)
            } else {
                Canon::Big(f < 0.0, format!("{:.0}", f.abs()).into())
            }
        }
        NumRef::F(f) => Canon::F(f.to_bits()),
        NumRef::Big { neg, digits } => Canon::Big(neg, digits.into()),
    }
}

/// Whether `value / divisor` is an integer (`divisor > 0`), reading floats as the shortest
/// decimal that prints them (so `0.3` is a multiple of `0.1`), as `jsonschema` does.
pub(crate) fn is_multiple(value: NumRef<'_>, divisor: Num) -> bool {
    match (value, divisor) {
        (NumRef::I(v), Num::I(d)) => v % d == 0,
        (NumRef::Big { digits, .. }, Num::I(d)) => big_rem(digits, d as u128) == Some(0),
        (NumRef::Big { digits, .. }, Num::F(d)) => {
            if d.fract() == 0.0
                && d < TWO_127
                && let Some(r) = big_rem(digits, d as u128)
            {
                return r == 0;
            }
            float_fallback(value, divisor)
        }
        (v, d) => match (decimal_parts(v), decimal_parts(d.as_ref())) {
            (Some((vm, vd)), Some((dm, dd))) if dm != 0 => {
                let shared = vd.min(dd);
                let scale = |m: i128, places: i32| {
                    10_i128
                        .checked_pow(u32::try_from(places - shared).ok()?)?
                        .checked_mul(m)
                };
                match (scale(vm, dd), scale(dm, vd)) {
                    (Some(lhs), Some(rhs)) if rhs != 0 => lhs % rhs == 0,
                    _ => float_fallback(value, divisor),
                }
            }
            _ => float_fallback(value, divisor),
        },
    }
}

fn float_fallback(value: NumRef<'_>, divisor: Num) -> bool {
    let q = value.approx() / divisor.as_ref().approx();
    q.is_finite() && q.fract() == 0.0
}

/// The remainder of a decimal integer by `d`, or `None` if a step would overflow.
fn big_rem(digits: &str, d: u128) -> Option<u128> {
    if d == 0 {
        return None;
    }
    let mut r: u128 = 0;
    for b in digits.bytes() {
        r = r.checked_mul(10)?.checked_add(u128::from(b - b'0'))? % d;
    }
    Some(r)
}

/// `x = mantissa / 10^decimals`, with `decimals >= 0`, from the shortest decimal of a float.
fn decimal_parts(n: NumRef<'_>) -> Option<(i128, i32)> {
    match n {
        NumRef::I(i) => Some((i, 0)),
        NumRef::Big { .. } => None,
        NumRef::F(f) => {
            let text = format!("{f:e}");
            let (mantissa, exp) = text.split_once('e')?;
            let exp: i32 = exp.parse().ok()?;
            let (neg, mantissa) = match mantissa.strip_prefix('-') {
                Some(m) => (true, m),
                None => (false, mantissa),
            };
            let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
            let mut m: i128 = 0;
            for b in int_part.bytes().chain(frac_part.bytes()) {
                m = m.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
            }
            let mut decimals = i32::try_from(frac_part.len()).ok()? - exp;
            if decimals < 0 {
                m = m.checked_mul(10_i128.checked_pow(u32::try_from(-decimals).ok()?)?)?;
                decimals = 0;
            }
            Some((if neg { -m } else { m }, decimals))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_exact() {
        let big = NumRef::of_text("170141183460469231731687303715884105728").unwrap(); // 2^127
        assert!(matches!(big, NumRef::Big { neg: false, .. }));
        let cases: &[(NumRef<'_>, NumRef<'_>, Ordering)] = &[
            (NumRef::I(1), NumRef::F(1.0), Ordering::Equal),
            (NumRef::I(1), NumRef::F(1.5), Ordering::Less),
            (NumRef::I(-1), NumRef::F(-1.5), Ordering::Greater),
            (
                NumRef::I(9_007_199_254_740_993),
                NumRef::F(9_007_199_254_740_992.0),
                Ordering::Greater,
            ),
            (big, NumRef::F(TWO_127), Ordering::Equal),
            (big, NumRef::F(1e300), Ordering::Less),
            (big, NumRef::F(-1e300), Ordering::Greater),
            (big, NumRef::I(i128::MAX), Ordering::Greater),
            (
                NumRef::of_text("-1000000000000000000000000000000000000000").unwrap(),
                NumRef::I(i128::MIN),
                Ordering::Less,
            ),
            (
                NumRef::of_text("99").unwrap(),
                NumRef::I(99),
                Ordering::Equal,
            ),
        ];
        for &(a, b, want) in cases {
            assert_eq!(cmp(a, b), want, "{a:?} vs {b:?}");
            assert_eq!(cmp(b, a), want.reverse(), "{b:?} vs {a:?}");
        }
    }

    #[test]
    fn multiples() {
        let cases: &[(NumRef<'_>, Num, bool)] = &[
            (NumRef::I(10), Num::I(5), true),
            (NumRef::I(11), Num::I(5), false),
            (NumRef::F(0.3), Num::F(0.1), true),
            (NumRef::F(0.35), Num::F(0.1), false),
            (NumRef::I(6), Num::F(1.5), true),
            (NumRef::F(4.5), Num::I(2), false),
            (NumRef::F(1e300), Num::I(10), true),
            (
                NumRef::of_text("100000000000000000000000000000000000000000").unwrap(),
                Num::I(7),
                false,
            ),
            (
                NumRef::of_text("700000000000000000000000000000000000000000").unwrap(),
                Num::I(7),
                true,
            ),
            (
                NumRef::of_text("700000000000000000000000000000000000000000").unwrap(),
                Num::F(7.0),
                true,
            ),
        ];
        for &(v, d, want) in cases {
            assert_eq!(is_multiple(v, d), want, "{v:?} / {d:?}");
        }
    }

    #[test]
    fn canon_matches_eq() {
        let nums = [
            NumRef::I(0),
            NumRef::F(-0.0),
            NumRef::F(3.0),
            NumRef::I(3),
            NumRef::F(3.5),
            NumRef::F(TWO_127),
            NumRef::of_text("170141183460469231731687303715884105728").unwrap(),
        ];
        for a in nums {
            for b in nums {
                assert_eq!(canon(a) == canon(b), eq(a, b), "{a:?} vs {b:?}");
            }
        }
    }
}
