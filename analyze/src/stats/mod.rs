//! The `nsys stats` reports, computed from the model with the same rows, order, columns and
//! numbers as Nsight Systems 2025.3.
