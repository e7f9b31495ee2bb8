//! Seed mixing: every place that turns one seed into many, in one module, so that no two streams
//! share a mixer by accident and none drifts from what earlier bundles were trained with.
//!
//! Each function is fixed: a change would change every bundle trained after it (the seeds pick
//! cluster centres, solver orders and synthetic points), so the tests pin their values.

/// The 64-bit golden ratio, SplitMix64's increment.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Derives the seed of child `index` from its parent's seed.
///
/// Trees seed each node from the path that leads to it, so a node's randomness does not depend on
/// which thread builds it or in which order nodes are visited.
pub fn derive_seed(seed: u64, index: u64) -> u64 {
    splitmix64(seed ^ splitmix64(index.wrapping_add(GOLDEN)))
}

/// The seed of ensemble member `t`: the run's seed stepped by `t` and scaled by the golden ratio.
pub fn member_seed(seed: u64, t: u64) -> u64 {
    seed.wrapping_add(t).wrapping_mul(GOLDEN)
}

/// A seed for task `index` of stream `tag`, well mixed (the SplitMix64 finalizer over a
/// combination of the three), as the synthetic generator draws each point and profile.
pub fn task_seed(seed: u64, tag: u64, index: u64) -> u64 {
    let z = seed
        .wrapping_add(tag.wrapping_mul(GOLDEN))
        .wrapping_add(index.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    finalize(z)
}

/// One step of the SplitMix64 generator, a strong 64-bit mixing function.
fn splitmix64(x: u64) -> u64 {
    finalize(x.wrapping_add(GOLDEN))
}

/// SplitMix64's output function.
fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values the mixers gave before they moved here: bundles and synthetic data sets
    /// depend on them bit for bit.
    #[test]
    fn mixers_are_bit_stable() {
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(derive_seed(0, 0), 0x46B7_3E79_F0C3_7C00);
        assert_eq!(derive_seed(42, 7), 0xEBB8_9F22_1A9F_2D89);
        assert_eq!(member_seed(42, 1), 43u64.wrapping_mul(GOLDEN));
        assert_eq!(task_seed(42, 3, 5), 0x6E97_9BDE_8310_8E2A);
    }
}
