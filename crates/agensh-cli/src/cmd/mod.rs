//! One file per command.

pub mod board;
pub mod events;
pub mod hub;
pub mod init;
pub mod msg;
pub mod pr;
pub mod workers;
