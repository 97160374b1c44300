//! How long the store's writes take, measured where they happen: how long a write waited
//! for the writer, how long its group ran, and how long the commit (the fsync) took. The hub
//! shows them at `/metrics` as histograms, so a slow write can be placed: queueing behind
//! other writes, the work itself, or the disk.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Upper bounds of the histograms' buckets, in milliseconds (one more bucket holds the
/// rest).
pub const BUCKETS_MS: [u64; 13] = [1, 2, 5, 10, 25, 50, 100, 250, 500, 750, 1000, 2500, 5000];

/// A histogram of durations with fixed buckets; lock-free.
#[derive(Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS_MS.len() + 1],
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Counts one duration.
    pub fn observe(&self, d: Duration) {
        let ms = d.as_secs_f64() * 1000.0;
        let i = BUCKETS_MS
            .iter()
            .position(|&b| ms <= b as f64)
            .unwrap_or(BUCKETS_MS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(
            d.as_micros().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    /// What it has counted so far.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: self
                .counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
            sum_secs: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

/// A histogram's counts at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// Counts per bucket (not cumulative): `BUCKETS_MS` in order, then the rest.
    pub counts: Vec<u64>,
    /// The sum of every duration counted, in seconds.
    pub sum_secs: f64,
}

impl HistogramSnapshot {
    /// How many durations were counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Cumulative counts at each bucket's upper bound, as Prometheus writes them: `(le in
    /// seconds, count)`, the last `+Inf`.
    pub fn cumulative(&self) -> Vec<(String, u64)> {
        let mut total = 0;
        self.counts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                total += c;
                let le = BUCKETS_MS
                    .get(i)
                    .map_or_else(|| "+Inf".to_string(), |b| format!("{}", *b as f64 / 1000.0));
                (le, total)
            })
            .collect()
    }
}

/// The store's write timings.
#[derive(Default)]
pub struct WriteStats {
    /// From a write being handed to the writer to its group beginning.
    pub wait: Histogram,
    /// From a group beginning to its commit returning (every job in it, and the commit).
    pub group: Histogram,
    /// The commit alone (for SQLite in WAL mode with `synchronous=FULL`: the WAL's fsync,
    /// and a checkpoint when one falls due).
    pub commit: Histogram,
    /// A checkpoint that copied pages from the WAL into the database file (on a thread of
    /// its own, beside the writer).
    pub checkpoint: Histogram,
    /// After a group's commit, answering its callers and publishing its events (the writer
    /// takes no new group meanwhile).
    pub publish: Histogram,
    /// Groups committed, and the jobs in them.
    pub groups: AtomicU64,
    pub jobs: AtomicU64,
    /// Of those jobs, the ones stored by a statement shared with others (the PostgreSQL
    /// store's batched board appends; none in SQLite).
    pub batched: AtomicU64,
    /// The writer thread's scheduler statistics file (`/proc/self/task/TID/schedstat`),
    /// when the writer is one thread (SQLite's) on Linux.
    pub writer_thread: OnceLock<std::path::PathBuf>,
}

/// Time a thread spent on a CPU and time it was ready to run but waited for one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThreadTimes {
    pub on_cpu: Duration,
    pub run_queue: Duration,
}

impl ThreadTimes {
    /// The calling thread's scheduler statistics file, for [`ThreadTimes::read`].
    pub fn own_file() -> Option<std::path::PathBuf> {
        // `/proc/thread-self` links to `PID/task/TID`: the path stays valid from any thread.
        let link = std::fs::read_link("/proc/thread-self").ok()?;
        Some(std::path::Path::new("/proc").join(link).join("schedstat"))
    }

    /// Reads a `schedstat` file: nanoseconds on a CPU, nanoseconds waiting on a run queue,
    /// time slices (Linux; `None` elsewhere, or when the kernel keeps no such statistics).
    pub fn read(file: &std::path::Path) -> Option<ThreadTimes> {
        Self::parse(&std::fs::read_to_string(file).ok()?)
    }

    /// Reads an open `schedstat` file again from its start (one `pread`: for a thread that
    /// reads its own times often).
    pub fn read_open(file: &std::fs::File) -> Option<ThreadTimes> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 128];
        let n = file.read_at(&mut buf, 0).ok()?;
        Self::parse(std::str::from_utf8(&buf[..n]).ok()?)
    }

    fn parse(text: &str) -> Option<ThreadTimes> {
        let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
        Some(ThreadTimes {
            on_cpu: Duration::from_nanos(fields.next()??),
            run_queue: Duration::from_nanos(fields.next()??),
        })
    }
}

/// [`WriteStats`] at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteStatsSnapshot {
    pub wait: HistogramSnapshot,
    pub group: HistogramSnapshot,
    pub commit: HistogramSnapshot,
    pub checkpoint: HistogramSnapshot,
    pub publish: HistogramSnapshot,
    pub groups: u64,
    pub jobs: u64,
    pub batched: u64,
    /// The writer thread's time on a CPU and waiting for one, since it started (SQLite's
    /// writer on Linux; `None` otherwise).
    pub writer: Option<ThreadTimes>,
}

impl WriteStats {
    /// What has been counted so far.
    pub fn snapshot(&self) -> WriteStatsSnapshot {
        WriteStatsSnapshot {
            wait: self.wait.snapshot(),
            group: self.group.snapshot(),
            commit: self.commit.snapshot(),
            checkpoint: self.checkpoint.snapshot(),
            publish: self.publish.snapshot(),
            groups: self.groups.load(Ordering::Relaxed),
            jobs: self.jobs.load(Ordering::Relaxed),
            batched: self.batched.load(Ordering::Relaxed),
            writer: self.writer_thread.get().and_then(|f| ThreadTimes::read(f)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedstat_line_gives_time_on_a_cpu_and_time_waiting_for_one() {
        let t = ThreadTimes::parse("1500000000 250000 42\n").expect("parsed");
        assert_eq!(t.on_cpu, Duration::from_millis(1500));
        assert_eq!(t.run_queue, Duration::from_micros(250));
        assert_eq!(ThreadTimes::parse("garbage"), None);
    }

    #[test]
    fn a_thread_reads_its_own_time_on_a_cpu() {
        let Some(file) = ThreadTimes::own_file() else {
            return; // not Linux: nothing to read
        };
        let before = ThreadTimes::read(&file).expect("schedstat readable");
        let kept = std::fs::File::open(&file).unwrap();
        let kept_before = ThreadTimes::read_open(&kept).expect("an open schedstat readable");
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let after = ThreadTimes::read(&file).expect("schedstat readable");
        // Read again through the file kept open: the new figures, not the first ones.
        let kept_after = ThreadTimes::read_open(&kept).expect("an open schedstat readable");
        assert!(
            kept_after.on_cpu >= kept_before.on_cpu + Duration::from_millis(10),
            "{kept_before:?} → {kept_after:?}"
        );
        assert!(
            after.on_cpu >= before.on_cpu + Duration::from_millis(10),
            "{before:?} → {after:?}"
        );
    }

    #[test]
    fn durations_land_in_the_bucket_of_their_upper_bound() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(500)); // ≤ 1 ms
        h.observe(Duration::from_millis(1)); // ≤ 1 ms (bounds are inclusive)
        h.observe(Duration::from_millis(3)); // ≤ 5 ms
        h.observe(Duration::from_millis(600)); // ≤ 750 ms
        h.observe(Duration::from_secs(9)); // beyond the last bound
        let s = h.snapshot();
        assert_eq!(s.count(), 5);
        assert_eq!(s.counts[0], 2);
        assert_eq!(s.counts[2], 1);
        assert_eq!(s.counts[9], 1);
        assert_eq!(s.counts[BUCKETS_MS.len()], 1);
        assert!((s.sum_secs - 9.6045).abs() < 1e-9, "{}", s.sum_secs);
        let c = s.cumulative();
        assert_eq!(c[0], ("0.001".to_string(), 2));
        assert_eq!(c[9], ("0.75".to_string(), 4));
        assert_eq!(c.last().unwrap(), &("+Inf".to_string(), 5));
    }
}
