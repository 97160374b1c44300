//! ProgramBench for agensh (issue 14): a task's files ([`task`]), the evaluator that repeats
//! ProgramBench's steps in a sandbox of its own instead of Docker ([`evaluate`],
//! [`sandbox`]), the test environment it runs tests in ([`env`]), how it reads JUnit XML
//! ([`junit`]), and the charts of a run's score over time ([`chart`]).

pub mod chart;
pub mod env;
pub mod evaluate;
pub mod junit;
pub mod sandbox;
pub mod task;
