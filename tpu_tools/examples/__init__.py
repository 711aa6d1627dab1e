"""The example index: working Pallas TPU kernels, parsed, searched and excerpted for a role to read."""
