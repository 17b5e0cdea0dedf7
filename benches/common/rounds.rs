//! A ratio measured in interleaved rounds: each round takes every side of
//! it one after the other, so load that comes and goes during a run weighs
//! on all of them alike, where criterion's functions, seconds or minutes
//! apart, each meet their own.

/// What the rounds found: the round with the median ratio, and the spread.
pub struct Rounds<const N: usize> {
    /// How many rounds ran.
    pub rounds: usize,
    /// The sides of the median round.
    pub median: [f64; N],
    /// Its ratio.
    pub ratio: f64,
    /// The smallest ratio of a round.
    pub min: f64,
    /// The largest.
    pub max: f64,
}

/// Runs `round` as many times as the environment variable `var` says
/// (default 15; 0 skips the measurement: `None`), each giving its sides,
/// and compares the rounds by `ratio` of their sides.
pub fn measure<const N: usize>(
    var: &str,
    mut round: impl FnMut() -> [f64; N],
    ratio: impl Fn(&[f64; N]) -> f64,
) -> Option<Rounds<N>> {
    let rounds: usize = std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    if rounds == 0 {
        return None;
    }
    let mut seen: Vec<(f64, [f64; N])> = (0..rounds)
        .map(|_| {
            let sides = round();
            (ratio(&sides), sides)
        })
        .collect();
    seen.sort_by(|x, y| x.0.total_cmp(&y.0));
    let (ratio, median) = seen[rounds / 2];
    Some(Rounds {
        rounds,
        median,
        ratio,
        min: seen[0].0,
        max: seen[rounds - 1].0,
    })
}
