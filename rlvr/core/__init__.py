"""The ground every package stands on: errors, the machine's faults, files written whole, the
console's progress, metric names, seed paths, numerics, timing, small statistics."""
