"""The shared vocabulary at the bottom: errors, metric names, seed paths, numerics, timing, small statistics."""
