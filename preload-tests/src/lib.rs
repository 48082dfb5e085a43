//! preload tests
