//! ProgramBench for agensh (issue 14): a task's files ([`task`]), the evaluator that repeats
//! ProgramBench's steps in a sandbox of its own instead of Docker ([`evaluate`],
//! [`sandbox`]), the test environment it runs tests in ([`env`]), how it reads JUnit XML
//! ([`junit`]), the charts of a run's score over time ([`chart`]), ProgramBench's own evaluator and images
//! where Docker exists ([`docker`]), a run's record of checkpoints ([`bench`]), a run
//! beside an organization with its checkpointer and scorer ([`run`]), `agensh eval`'s
//! scoring of one submission or a directory of them ([`submissions`]), and the lines people
//! read of all these ([`show`]).

pub mod bench;
pub mod chart;
pub mod docker;
pub mod env;
pub mod evaluate;
pub mod junit;
pub mod run;
pub mod sandbox;
pub mod show;
pub mod submissions;
pub mod task;
