use std::time::Duration;

/// Delay before the attempt after `attempt` (1-based): exponential from `base`,
/// capped at `max`, with "equal jitter" (half fixed, half random): workers spread
/// out, and below the cap a delay is never shorter than the one before it.
pub fn retry_delay(attempt: i32, base: Duration, max: Duration) -> Duration {
    let exponent = attempt.clamp(1, 31) as u32 - 1;
    let full = base.saturating_mul(1u32 << exponent.min(30)).min(max);
    let half = full / 2;
    half + half.mul_f64(fastrand::f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_stay_within_bounds() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(10);
        for _ in 0..200 {
            let mut previous = Duration::ZERO;
            for attempt in 1..=12 {
                let delay = retry_delay(attempt, base, max);
                let full = base.saturating_mul(1 << (attempt - 1)).min(max);
                assert!(
                    delay >= full / 2 && delay <= full,
                    "attempt {attempt}: {delay:?}"
                );
                let uncapped = base.saturating_mul(1 << (attempt - 1)) <= max;
                assert!(
                    !uncapped || delay >= previous,
                    "attempt {attempt} shrank: {delay:?} < {previous:?}"
                );
                previous = delay;
            }
        }
    }

    #[test]
    fn huge_attempt_numbers_do_not_overflow() {
        let delay = retry_delay(i32::MAX, Duration::from_secs(1), Duration::from_secs(60));
        assert!(delay <= Duration::from_secs(60));
    }
}
