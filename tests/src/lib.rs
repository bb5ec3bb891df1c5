//! End-to-end scenario tests live under `tests/tests/`.
