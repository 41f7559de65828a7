"""The scale benchmark: a synthetic GPU cluster, a fast fake API, and a runner."""
