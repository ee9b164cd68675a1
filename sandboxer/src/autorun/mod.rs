//! The autorun guard: files that make a program outside the sandbox run code later.

pub mod repos;
