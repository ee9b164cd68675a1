//! What the dispatcher's live test files share: the unprivileged test user, running a program
//! as that user, and failing a test whose machine is not set up (`agentworks-test-user`).
#![allow(unused_imports)]

pub use agentworks_test_user::*;
