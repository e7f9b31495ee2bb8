//! Ranking metrics for multi-label predictions.
