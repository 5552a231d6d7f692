//! Kubernetes quantities (`250m`, `1Ki`, `5e3`) as numbers.

/// Parses a Kubernetes quantity into base units, scaled by `scale` (1000 for
/// millicores). `None` for anything unparseable.
pub fn quantity(raw: &str, scale: f64) -> Option<i64> {
    quantity_value(raw).map(|v| (v * scale).round() as i64)
}

/// A Kubernetes quantity in base units (`250m` is 0.25, `1Ki` is 1024);
/// `None` for anything unparseable or not finite (`1e400`: a tenant's
/// kubelet reports what it likes).
pub fn quantity_value(raw: &str) -> Option<f64> {
    let raw = raw.trim();
    let split = raw
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(raw.len());
    let (number, suffix) = raw.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    Some(number * factor).filter(|v| v.is_finite())
}
