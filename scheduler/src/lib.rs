//! GPU scheduling policies: FairGV fair queuing and the baselines, as pure
//! logic behind one trait with an injectable clock.
//!
//! Not built yet: this crate reserves its place in the workspace.
