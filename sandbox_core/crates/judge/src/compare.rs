//! Comparison of a program's output with the expected output.

use sandbox_proto::Compare;

/// `None` when equal, else a short description of the first difference.
pub fn differ(mode: Compare, got: &[u8], want: &[u8], tolerance: f64) -> Option<String> {
    match mode {
        Compare::Exact => exact(got, want),
        Compare::Float => tokens(got, want, Some(tolerance)),
        Compare::Whitespace | Compare::Unspecified => tokens(got, want, None),
    }
}

fn exact(got: &[u8], want: &[u8]) -> Option<String> {
    if got == want {
        return None;
    }
    let at = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    Some(format!(
        "output differs at byte {at} ({} bytes, expected {})",
        got.len(),
        want.len()
    ))
}

fn short(t: &[u8]) -> String {
    let s = String::from_utf8_lossy(t);
    if s.chars().count() > 40 {
        format!("{}...", s.chars().take(40).collect::<String>())
    } else {
        s.into_owned()
    }
}

fn float_eq(a: &[u8], b: &[u8], tol: f64) -> bool {
    let (Ok(a), Ok(b)) = (std::str::from_utf8(a), std::str::from_utf8(b)) else {
        return false;
    };
    let (Ok(x), Ok(y)) = (a.parse::<f64>(), b.parse::<f64>()) else {
        return false;
    };
    if x.is_nan() || y.is_nan() {
        return x.is_nan() && y.is_nan();
    }
    // Absolute or relative error within the tolerance, as most judges accept.
    let diff = (x - y).abs();
    diff <= tol || diff <= tol * y.abs()
}

fn tokens(got: &[u8], want: &[u8], tol: Option<f64>) -> Option<String> {
    let mut g = got
        .split(|c| c.is_ascii_whitespace())
        .filter(|t| !t.is_empty());
    let mut w = want
        .split(|c| c.is_ascii_whitespace())
        .filter(|t| !t.is_empty());
    let mut i = 0usize;
    loop {
        match (g.next(), w.next()) {
            (None, None) => return None,
            (Some(a), Some(b)) => {
                let same = a == b || tol.is_some_and(|t| float_eq(a, b, t));
                if !same {
                    return Some(format!(
                        "token {} is {:?}, expected {:?}",
                        i + 1,
                        short(a),
                        short(b)
                    ));
                }
            }
            (Some(a), None) => {
                return Some(format!("extra output from token {}: {:?}", i + 1, short(a)))
            }
            (None, Some(b)) => {
                return Some(format!(
                    "output ends at token {}, expected {:?}",
                    i + 1,
                    short(b)
                ))
            }
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_is_byte_for_byte() {
        assert!(differ(Compare::Exact, b"3\n", b"3\n", 0.0).is_none());
        assert!(differ(Compare::Exact, b"3", b"3\n", 0.0).is_some());
    }

    #[test]
    fn whitespace_ignores_spacing_and_trailing_newlines() {
        assert!(differ(Compare::Whitespace, b"1  2\n3\n\n", b"1 2 3", 0.0).is_none());
        assert!(differ(Compare::Unspecified, b"1 2", b"1 2 3", 0.0)
            .unwrap()
            .contains("ends"));
        assert!(differ(Compare::Whitespace, b"1 2 4", b"1 2 3", 0.0)
            .unwrap()
            .contains("token 3"));
        assert!(differ(Compare::Whitespace, b"1 2 3 4", b"1 2 3", 0.0)
            .unwrap()
            .contains("extra"));
    }

    #[test]
    fn float_accepts_within_tolerance_only() {
        assert!(differ(Compare::Float, b"0.3333333", b"0.333333333", 1e-6).is_none());
        assert!(differ(Compare::Float, b"1000000.5", b"1000000.0", 1e-6).is_none());
        assert!(differ(Compare::Float, b"0.34", b"0.33", 1e-6).is_some());
        assert!(differ(Compare::Float, b"abc", b"abc", 1e-6).is_none());
        assert!(differ(Compare::Float, b"nan", b"1", 1e-6).is_some());
    }
}
