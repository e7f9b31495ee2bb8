//! The model bundle container.
