//! What agensh's tests share, written once.
//!
//! - [`Org`] — a temporary organization directory: a git workspace seeded with the files a
//!   test names, a hub serving it in-process on a free 127.0.0.1 port (over a SQLite store
//!   in the organization's state directory) and workers with their tokens; or, for the
//!   workspace's own tests, the workspace alone. Built with [`Org::builder`].
//! - [`wait_until`] and [`wait_until_blocking`] — wait for a condition, fail the test
//!   with what was awaited after a limit.
//! - [`scenario`] — a typed builder of the scripted agent's scenario files, made of the
//!   agent's own [`scenario::Step`]s and checked by its own parser.
//! - [`pg`] — every throwaway PostgreSQL server of the project: the tests' shared one, a
//!   server of its own, the benchmarks' and one inside a host of a network-namespace testnet.
//!
//! Real git, a real hub and real PostgreSQL: nothing is mocked. A failure panics with what
//! went wrong, as a test wants. It is a dev-dependency only (agensh-bench, benchmark tooling,
//! links it as a normal dependency), never of agensh-node, agensh-client or agensh-script,
//! whose tests must not reach the hub.

mod org;
pub mod pg;
pub mod scenario;
mod wait;

pub use org::{plain_git, NewOrg, Org};
pub use wait::{wait_until, wait_until_blocking};
