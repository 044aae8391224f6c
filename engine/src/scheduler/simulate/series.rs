//! What a replay looked like over time: GPUs held by running jobs and jobs waiting, averaged
//! over fixed-width buckets of virtual time. When a replay outgrows [`MAX_BUCKETS`],
//! neighbouring buckets merge and the width doubles, so a million-job replay takes as little
//! memory as a ten-job one.

/// The most buckets a series keeps.
pub const MAX_BUCKETS: usize = 1024;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    /// Seconds of virtual time per bucket (0 until something is added).
    pub width: u64,
    /// Per bucket: GPU-seconds held by jobs whose every worker runs.
    pub gpu_seconds: Vec<u128>,
    /// Per bucket: job-seconds spent waiting.
    pub queue_seconds: Vec<u128>,
}

/// One bucket, averaged: its start, mean GPUs held, mean jobs waiting.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub t: u64,
    pub gpus: f64,
    pub queue: f64,
}

impl Series {
    /// Records that from `from` to `to` (seconds), `gpus` GPUs were held and `queue` jobs
    /// waited.
    pub fn add(&mut self, from: u64, to: u64, gpus: u64, queue: u64) {
        if to <= from {
            return;
        }
        if self.width == 0 {
            self.width = 1;
        }
        while to > self.width.saturating_mul(MAX_BUCKETS as u64) {
            self.coarsen();
        }
        let mut t = from;
        while t < to {
            let b = (t / self.width) as usize;
            let end = ((b as u64 + 1) * self.width).min(to);
            if self.gpu_seconds.len() <= b {
                self.gpu_seconds.resize(b + 1, 0);
                self.queue_seconds.resize(b + 1, 0);
            }
            let dt = u128::from(end - t);
            self.gpu_seconds[b] += u128::from(gpus) * dt;
            self.queue_seconds[b] += u128::from(queue) * dt;
            t = end;
        }
    }

    /// Halves the resolution: bucket pairs merge, the width doubles.
    fn coarsen(&mut self) {
        let merge = |v: &[u128]| -> Vec<u128> { v.chunks(2).map(|c| c.iter().sum()).collect() };
        self.gpu_seconds = merge(&self.gpu_seconds);
        self.queue_seconds = merge(&self.queue_seconds);
        self.width *= 2;
    }

    /// The buckets up to `until` (the replay's end), averaged over the part of each that
    /// lies before it.
    pub fn points(&self, until: u64) -> Vec<Point> {
        (0..self.gpu_seconds.len())
            .map(|b| {
                let t = b as u64 * self.width;
                let span = (until.saturating_sub(t)).min(self.width).max(1) as f64;
                Point {
                    t,
                    gpus: self.gpu_seconds[b] as f64 / span,
                    queue: self.queue_seconds[b] as f64 / span,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_average_and_merge_when_the_replay_outgrows_them() {
        let mut s = Series::default();
        s.add(0, 10, 4, 1);
        s.add(10, 20, 2, 3);
        assert_eq!(s.width, 1);
        assert_eq!(s.points(20)[0].gpus, 4.0);
        assert_eq!(s.points(20)[15].queue, 3.0);
        // Far past MAX_BUCKETS seconds: the width doubles until it fits.
        s.add(20, 10_000, 0, 0);
        assert!(s.gpu_seconds.len() <= MAX_BUCKETS);
        assert_eq!(s.width, 16);
        // The first bucket (0..16) held 10 s x 4 + 6 s x 2.
        assert_eq!(s.gpu_seconds[0], 52);
        let total: u128 = s.gpu_seconds.iter().sum();
        assert_eq!(total, 60);
    }
}
