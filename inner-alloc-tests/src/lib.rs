//! Nothing here: the tests in `tests/` are the package (see `Cargo.toml`).
