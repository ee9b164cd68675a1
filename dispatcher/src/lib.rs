//! `dispatcher`: turns "run CLI X for chat C on workflow W" into a policy, a command line and
//! an environment, and asks `sandboxer` to confine it. The only unconfined path out.
